"""The clean verb (design §3.9): load the records, audit them when no audit is given, and write a
copy with the suspected false negatives removed or relabeled (:mod:`transferdx.cleaning` holds the
pure core and :class:`CleanResult`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from transferdx.auditing.result import Audit
from transferdx.cleaning import RELABELED_RELATION, CleanResult, clean_records, reasons_of
from transferdx.diagnostics.suspicion import REASONS, TEXT_REASONS
from transferdx.inputs.records import LoadResult, Record
from transferdx.pipeline.auditing import audit
from transferdx.pipeline.encoders import EncoderLike
from transferdx.pipeline.loading import load
from transferdx.pipeline.settings import AuditOptions


def _output_plan(data: Any, format: str, loaded: LoadResult) -> dict[str, Any]:
    """How the copy is written and whether that is the input's own format (never pretended): only
    what the records reader read (``input.format == "records"`` in every source's descriptor) is."""
    is_path = isinstance(data, str | Path) and Path(str(data)).exists()
    forms = sorted({str(d.get("input", {}).get("format", "?")) for d in loaded.descriptors.values()})
    if is_path and format == "records" and forms == ["records"]:
        path = Path(str(data))
        plan: dict[str, Any]
        if path.is_file():
            plan = {"file_name": path.name, "output_format": "records JSONL (one file, named as the input)"}
        else:
            plan = {"file_name": None, "output_format": "records JSONL folder (one <source>.jsonl per source)"}
        return plan | {"input_format": "records", "faithful": True, "note": ""}
    if is_path:
        what = f"input {', '.join(forms) if format == 'records' else repr(format)}"
        format = "; ".join(forms) if format == "records" else format
    elif isinstance(data, str) and data == "demo":
        what, format = "the embedded demo", "demo"
    else:
        what, format = f"in-memory input ({type(data).__name__})", "in_memory"
    note = f"{what} cannot be written back in its own format yet; the copy is records JSONL"
    return {
        "file_name": None,
        "input_format": format,
        "output_format": "records JSONL folder (one <source>.jsonl per source)",
        "faithful": False,
        "note": note,
    }


def clean(
    records: Any,
    audit_result: Audit | pd.DataFrame | None = None,
    *,
    reasons: Sequence[str] | None = None,
    action: str = "remove",
    out: str | Path | None = None,
    encoder: EncoderLike | None = "minilm_l6",
    cache_dir: str | Path | None = None,
    format: str = "records",
    source: str | None = None,
    options: AuditOptions | None = None,
    **overrides: Any,
) -> CleanResult:
    """Remove (``action="remove"``) or relabel as positives (``"relabel"``) the negatives suspected
    of being false negatives for ``reasons`` (None: every reason the audit checked; see
    :data:`transferdx.diagnostics.suspicion.REASONS`). ``records``: anything :func:`transferdx.load`
    takes (``format``, ``source`` as there). ``audit_result``: an :class:`Audit` of the same records
    or its per-negative frame; without it the records are audited here (``encoder``, ``options``
    and keyword ``overrides`` as :func:`transferdx.audit`; no encoder when every reason asked for is
    a text reason). With ``out`` the copy is written there (:meth:`CleanResult.save`)."""
    options = dataclasses.replace(options or AuditOptions(), **overrides)
    loaded = load(records, format=format, source=source, on_error=options.on_error)
    frame: pd.DataFrame
    result: Audit | None = audit_result if isinstance(audit_result, Audit) else None
    if audit_result is None:
        text_only = reasons is not None and set(reasons) <= set(TEXT_REASONS)
        enc = None if text_only else encoder
        # controls would only add sources to audit: suspicion is per negative, of the records alone
        result = audit(loaded, options, encoder=enc, cache_dir=cache_dir, controls="none")
        frame = result.result.negatives
    else:
        frame = audit_result.result.negatives if isinstance(audit_result, Audit) else audit_result
    chosen = reasons_of(frame, reasons)
    cleaned, removed, emptied = clean_records(loaded.records, frame, reasons=chosen, action=action)
    plan = _output_plan(records, format, loaded)
    descriptor = _descriptor(loaded, frame, chosen, action, (cleaned, removed, emptied), plan, result)
    done = CleanResult(_cleaned_copy(loaded, cleaned, descriptor), removed, emptied, descriptor, result)
    if out is not None:
        done.save(out)
    return done


def _descriptor(
    loaded: LoadResult,
    frame: pd.DataFrame,
    chosen: Sequence[str],
    action: str,
    outcome: tuple[list[Record], pd.DataFrame, pd.DataFrame],
    plan: Mapping[str, Any],
    result: Audit | None,
) -> dict[str, Any]:
    """What ``clean.json`` holds: action, reasons, counts in and out (``outcome``: cleaned records,
    removed and emptied tables), the output ``plan``, and the audit's settings and suspicion summary
    when the audit ran here."""
    cleaned, removed, emptied = outcome
    counts = removed["action"].value_counts()
    descriptor: dict[str, Any] = {
        "action": action,
        "reasons": list(chosen),
        "reasons_checked": [r for r in REASONS if r in reasons_of(frame, None)],
        "relabeled_relation": RELABELED_RELATION if action == "relabel" else None,
        "n_records_in": len(loaded.records),
        "n_negatives_in": sum(len(r.negatives) for r in loaded.records),
        "n_removed": int(counts.get("removed", 0)),
        "n_relabeled": int(counts.get("relabeled", 0)),
        "n_emptied": len(emptied),
        "n_records_out": len(cleaned),
        "n_excluded": len(loaded.exclusions),
        "measured_false_negatives_dropped": sorted(loaded.false_negatives),
        **plan,
    }
    if result is not None:
        descriptor["audit"] = {k: result.settings[k] for k in sorted(result.settings)}
        descriptor["fn_suspicion"] = dict(result.result.suspicion)
    return descriptor


def _cleaned_copy(loaded: LoadResult, cleaned: list[Record], descriptor: Mapping[str, Any]) -> LoadResult:
    """The cleaned records with the input's exclusions and descriptors, each cleaned source's
    descriptor noting how (action, reasons, relabeled relation)."""
    out_loaded = LoadResult(
        cleaned,
        list(loaded.exclusions),
        {s: dict(d) for s, d in loaded.descriptors.items()},
        {},  # measured false negatives were counted before cleaning: not carried over
    )
    summary = {k: descriptor[k] for k in ("action", "reasons", "relabeled_relation")}
    for name in {r.source for r in cleaned}:
        out_loaded.describe(name, cleaned=summary)
    return out_loaded
