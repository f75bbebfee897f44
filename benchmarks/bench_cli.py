"""Benchmark: how fast the command line's edges answer — ``--help`` and the one-line error exits.

Side by side in one run, each as a fresh subprocess (the console scripts of this environment, run in
a scratch folder so that nothing lands in the repository): ``transferdx-audit --help``,
``transferdx-clean --help``, an unknown override (``transferdx-audit backbone.batch_sizee=16``, which
still gets its "did you mean") and a missing input file (``transferdx-audit input=nope.parquet``).
One unreported warm-up run each, then ``--repeats`` runs; prints the median wall time (and its range)
of each against the goal of under 1 s, the median CPU time (user + system: less sensitive than the wall
time to other work on the machine, which the load average shows), the exit status and the message the
user sees, and the CPU. Exits 0 whatever it measures: a benchmark, not a test.

``--against DIR`` also times each command from another copy of the package, row under row: DIR holds
its ``transferdx/`` and ``conf/`` (``git archive HEAD transferdx conf | tar -x -C DIR`` for the last
commit), run as ``python -c "from transferdx.cli import audit_main; audit_main()"`` with
``PYTHONPATH=DIR`` — the console script's own call — in this environment.

    python benchmarks/bench_cli.py [--repeats 5] [--against DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 1.0

CASES: tuple[tuple[str, str, list[str]], ...] = (
    ("audit --help", "transferdx-audit", ["--help"]),
    ("clean --help", "transferdx-clean", ["--help"]),
    ("unknown override", "transferdx-audit", ["backbone.batch_sizee=16"]),
    ("missing input file", "transferdx-audit", ["input=nope.parquet"]),
)


def cpu_model() -> str:
    """The CPU's ``model name`` from /proc/cpuinfo and the cores this process may use."""
    name = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name}, {cores} cores"


def script(name: str) -> str:
    """The console script ``name`` next to this interpreter (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found next to {sys.executable} or on PATH (pip install -e .)")
    return found


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def from_source(name: str) -> list[str]:
    """The console script ``name``'s call, as a command for this interpreter (``PYTHONPATH`` picks the package)."""
    verb = name.removeprefix("transferdx-")
    return [sys.executable, "-c", f"import sys; from transferdx.cli import {verb}_main; sys.exit({verb}_main())"]


def timed(command: list[str], cwd: Path, pythonpath: Path | None = None) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds, exit status and the last line of stderr (else stdout) of one run."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    cpu, started = _children_cpu(), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds, cpu = time.perf_counter() - started, _children_cpu() - cpu
    lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return seconds, cpu, done.returncode, lines[-1] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per command (after one warm-up)")
    parser.add_argument("--against", type=Path, help="another copy's folder (transferdx/, conf/) to time too")
    args = parser.parse_args()
    against = args.against.resolve() if args.against else None
    if against is not None and not (against / "transferdx" / "cli.py").is_file():
        raise SystemExit(f"--against {against}: no transferdx/cli.py there")

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"CPU: {cpu_model()}; load average {load}; Python {sys.version.split()[0]}")
    print(f"{args.repeats} runs each after a warm-up; wall: median (min-max), goal < {GOAL_S:g} s; cpu: median")
    if against is not None:
        print(f"each command twice: this environment's console script, then {against}")
    print(f"{'command':<28} {'wall':>6} {'(min-max)':>12}  {'goal':<8} {'cpu':>6}  exit  message")
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        work = Path(tmp)
        for label, name, argv in CASES:
            variants = [(label, [script(name), *argv], None)]
            if against is not None:
                variants.append((f"  {against.name}", [*from_source(name), *argv], against))
            for row, command, pythonpath in variants:
                timed(command, work, pythonpath)
                runs = [timed(command, work, pythonpath) for _ in range(args.repeats)]
                seconds, cpu = [r[0] for r in runs], statistics.median(r[1] for r in runs)
                median, (_, _, status, message) = statistics.median(seconds), runs[-1]
                verdict = "met" if median < GOAL_S else "NOT met"
                spread = f"({min(seconds):.2f}-{max(seconds):.2f})"
                shown = message if len(message) <= 72 else message[:69] + "..."
                print(f"{row:<28} {median:>5.2f}s {spread:>12}  {verdict:<8} {cpu:>5.2f}s  {status:>4}  {shown}")


if __name__ == "__main__":
    main()
