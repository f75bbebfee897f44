"""Backend parity (issue 22): audit the same data with each encoder runtime and compare with torch fp32.

For each data set (the demo, ``data=scifact``, ``data=msmarco_dl19``) and each runtime, runs
``transferdx-audit data=<set> backbone.backend=<b> backbone.precision=<p>`` into ``<out>/<set>/<b>-<p>/``
(one shared embedding cache, so the torch fp32 reference may be warm; a run whose folder is complete
is re-used, with the time it took then), then compares every runtime's
artifacts with torch fp32's:

- ψ (``psi_mean``): must be identical (the lexical side does not use the encoder);
- the largest |difference| of ρ̄, η̄, inversion rate, margin mean, suspect rate, the two composites,
  and of every numeric profile column (point estimates and interval ends);
- flags (the ``flags`` and ``absolute_flags`` columns), the control catch-rate (``profile.json``) and
  the verdict (the ``## Verdict`` section of ``report.md``): identical or not.

Writes ``parity.json`` and ``parity.md`` into ``--out``. The plan and predictions are in
``experiments/results/backends/PLAN.md``.

    python experiments/backend_parity.py [--out experiments/results/backends] [--sets demo scifact msmarco_dl19]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

RUNTIMES = [("torch", "fp32"), ("openvino", "fp32"), ("openvino", "int8")]
HEADLINE = {
    "rho_mean": "ρ̄",
    "eta_mean": "η̄",
    "inversion_rate": "inversion rate",
    "margin_mean": "margin mean",
    "fn_suspect_rate": "suspect rate",
    "composite_logdet": "composite (logdet)",
    "composite_trace": "composite (trace)",
}


def verdict(report: Path) -> str:
    """The ``## Verdict`` section of a report."""
    text = report.read_text(encoding="utf-8")
    start = text.index("## Verdict")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def run_audit(data: str, backend: str, precision: str, out: Path) -> float:
    """One audit through the command line; its wall time in seconds."""
    script = Path(sys.executable).with_name("transferdx-audit")
    command = [str(script), f"backbone.backend={backend}", f"backbone.precision={precision}", f"output_dir={out}"]
    if data != "demo":
        command.append(f"data={data}")
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def compare(reference: Path, other: Path) -> dict[str, Any]:
    """Differences of ``other``'s audit from ``reference``'s (both output folders)."""
    a, b = pd.read_csv(reference / "profile.csv"), pd.read_csv(other / "profile.csv")
    if list(a["source"]) != list(b["source"]):
        raise SystemExit(f"{other}: sources differ from {reference}")
    numeric = [c for c in a.select_dtypes("number").columns if c in b.columns]
    diff = (a[numeric] - b[numeric]).abs().max()
    worst = diff.idxmax() if len(diff) else None
    ja = json.loads((reference / "profile.json").read_text(encoding="utf-8"))
    jb = json.loads((other / "profile.json").read_text(encoding="utf-8"))
    return {
        "psi_identical": bool(a["psi_mean"].equals(b["psi_mean"])),
        "psi_max_diff": float(diff.get("psi_mean", 0.0)),
        "headline": {k: float(diff[k]) for k in HEADLINE if k in diff},
        "max_any_column": float(diff.max()) if len(diff) else 0.0,
        "max_any_column_name": worst,
        "flags_identical": bool(
            a["flags"].astype("string").fillna("").equals(b["flags"].astype("string").fillna(""))
            and a["absolute_flags"].astype("string").fillna("").equals(b["absolute_flags"].astype("string").fillna(""))
        ),
        "catch_rate_identical": ja["catch_rate"] == jb["catch_rate"],
        "verdict_identical": verdict(reference / "report.md") == verdict(other / "report.md"),
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Backend parity: each runtime against torch fp32",
        "",
        "Written by `experiments/backend_parity.py`; plan and predictions in `PLAN.md`. Cells are the",
        "largest |difference| from torch fp32 over the sources. `audit s` is each run's wall time as it",
        "happened (the torch fp32 runs found most vectors cached by earlier sessions, the others encoded",
        "cold, and two cores were shared with tests at times): not a speed comparison; see",
        "`benchmarks/bench_backends.py` for that.",
        "",
        "| data | runtime | audit s | ψ identical | " + " | ".join(HEADLINE.values()) + " | any column (which) "
        "| flags | catch-rate | verdict |",
        "|---" * (8 + len(HEADLINE)) + "|",
    ]
    for data, runs in results["sets"].items():
        for runtime, r in runs.items():
            if r.get("skipped"):
                lines.append(f"| {data} | {runtime} | not run | " + " | ".join(["—"] * (len(HEADLINE) + 5)) + " |")
                continue
            if runtime == "torch-fp32":
                cells = ["—"] * (len(HEADLINE) + 5)
                lines.append(f"| {data} | {runtime} (reference) | {r['seconds']:.1f} | " + " | ".join(cells) + " |")
                continue
            c = r["vs_torch_fp32"]
            heads = [f"{c['headline'].get(k, float('nan')):.1e}" for k in HEADLINE]
            yes = {True: "same", False: "**differ**"}
            lines.append(
                f"| {data} | {runtime} | {r['seconds']:.1f} | {'yes' if c['psi_identical'] else '**no**'} | "
                + " | ".join(heads)
                + f" | {c['max_any_column']:.1e} ({c['max_any_column_name']}) | {yes[c['flags_identical']]} | "
                f"{yes[c['catch_rate_identical']]} | {yes[c['verdict_identical']]} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="experiments/results/backends")
    parser.add_argument("--work", default="outputs/backend-parity", help="where the audits are written")
    parser.add_argument("--sets", nargs="+", default=["demo", "scifact", "msmarco_dl19"])
    parser.add_argument("--skip", nargs="*", default=[], help="runs left out, as <set>/<backend>-<precision>")
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    results: dict[str, Any] = {"sets": {}, "runtimes": [f"{b}-{p}" for b, p in RUNTIMES]}
    for data in args.sets:
        runs: dict[str, Any] = {}
        for backend, precision in RUNTIMES:
            name = f"{backend}-{precision}"
            folder = work / data / name
            if f"{data}/{name}" in args.skip:
                runs[name] = {"skipped": True}
                continue
            timing = folder / "parity-seconds.txt"
            if timing.is_file() and (folder / "profile.csv").is_file():  # finished by an earlier run
                seconds = float(timing.read_text(encoding="utf-8"))
            else:
                seconds = run_audit(data, backend, precision, folder)
                timing.write_text(f"{seconds:.3f}\n", encoding="utf-8")
            runs[name] = {"seconds": seconds}
            if name != "torch-fp32":
                runs[name]["vs_torch_fp32"] = compare(work / data / "torch-fp32", folder)
            print(f"{data} {name}: {seconds:.1f} s", json.dumps(runs[name].get("vs_torch_fp32", {})), flush=True)
        results["sets"][data] = runs
    out.mkdir(parents=True, exist_ok=True)
    (out / "parity.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (out / "parity.md").write_text(markdown(results), encoding="utf-8")
    print(markdown(results))


if __name__ == "__main__":
    main()
