"""The tables verb: :func:`render_tables` runs the analysis (agreement and matching computed, written
and handed to the tables in memory, or read from the folders of an earlier ``transferdx-agree`` /
``transferdx-match``; validation), builds the tables (:mod:`transferdx.paper`) and writes them with
their cell traces, the figures and a manifest of the inputs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from transferdx.analysis import studies as _studies
from transferdx.analysis.sensitivity import AuditRun, sensitivity
from transferdx.analysis.study import StudyData
from transferdx.artifacts import atomic_write_bytes, atomic_write_text, canonical_json, csv_text, safe_join
from transferdx.pipeline.analysing import (
    Studies,
    agree,
    as_studies,
    match,
    validate,
    write_agreement,
    write_matching,
    write_validation,
)
from transferdx.pipeline.settings import AnalysisSettings

if TYPE_CHECKING:
    from transferdx.paper.tables import PaperTable, TableInputs


def _read_optional_csv(path: Path) -> pd.DataFrame | None:
    """A CSV the analysis wrote, or None when it is empty (no block had two sources)."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None


def _optional_frame(frame: pd.DataFrame) -> pd.DataFrame | None:
    """A frame the analysis computed, or None when it is empty (no block had two sources): what
    :func:`_read_optional_csv` gives for its CSV."""
    return None if frame.columns.empty else frame


def _keys_sorted(value: Any) -> Any:
    """``value`` with every mapping in key order, as ``transfer_uncertainty.json`` holds it (the
    tables list blocks and source pairs in that order)."""
    if isinstance(value, Mapping):
        return {k: _keys_sorted(value[k]) for k in sorted(value)}
    return value


def agreement_for_tables(
    agreed: Mapping[str, Any] | None, folder: Path
) -> tuple[pd.DataFrame | None, Mapping[str, Any]]:
    """(agreement table, transfer uncertainty) for the tables: ``agreed`` (:func:`agree`'s result)
    as computed, else read from ``folder`` (``agreement.csv``, ``transfer_uncertainty.json``)."""
    if agreed is not None:
        return _optional_frame(agreed["agreement"]), _keys_sorted(agreed["uncertainty"])
    uncertainty = json.loads((folder / "transfer_uncertainty.json").read_text(encoding="utf-8"))
    return _read_optional_csv(folder / "agreement.csv"), uncertainty


def matching_for_tables(
    matched: Mapping[str, pd.DataFrame] | None, folder: Path
) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(matched, balance) for the tables: ``matched`` (:func:`match`'s result) as computed, else
    read from ``folder`` (``matched.csv``, ``balance.csv``)."""
    if matched is not None:
        return _optional_frame(matched["matched"]), _optional_frame(matched["balance"])
    return _read_optional_csv(folder / "matched.csv"), _read_optional_csv(folder / "balance.csv")


@dataclass(frozen=True)
class TablesAnalysis:
    """The analysis the tables take, each part with the folder that holds its artifacts:
    ``agreement`` and ``matching`` as computed (:func:`agree`, :func:`match`; None: read from their
    folder, an earlier ``transferdx-agree`` / ``transferdx-match``) and ``validation``
    (:func:`validate`)."""

    agree_folder: Path
    match_folder: Path
    validation_folder: Path
    validation: Mapping[str, Mapping[str, pd.DataFrame]]
    agreement: Mapping[str, Any] | None = None
    matching: Mapping[str, pd.DataFrame] | None = None


def analyse_for_tables(
    studies: Sequence[StudyData],
    settings: AnalysisSettings,
    folder: Path,
    agree_dir: str | Path | None = None,
    match_dir: str | Path | None = None,
) -> TablesAnalysis:
    """Agreement and matching computed and written under ``folder`` (``agree/``, ``match/``) unless
    ``agree_dir`` / ``match_dir`` hold them already; the validation written to ``folder/validation``."""
    agree_path = Path(agree_dir) if agree_dir else safe_join(folder, "agree")
    agreed = None if agree_dir else agree(studies, settings)
    if agreed is not None:
        write_agreement(agreed, agree_path)
    match_path = Path(match_dir) if match_dir else safe_join(folder, "match")
    matched = None if match_dir else match(studies, settings)
    if matched is not None:
        write_matching(matched, match_path)
    validation = validate(studies, settings)
    write_validation(validation, safe_join(folder, "validation"))
    return TablesAnalysis(agree_path, match_path, folder / "validation", validation, agreed, matched)


def table_inputs(
    studies: Sequence[StudyData],
    settings: AnalysisSettings,
    analysis: TablesAnalysis,
    runs: tuple[AuditRun, ...],
    rel: Callable[[str | Path], str],
) -> TableInputs:
    """Everything the tables read: the studies (the per-negative frame of the first only, for
    Table 10), the ``analysis``, the sensitivity ``runs``, and the settings that shape the tables;
    ``rel`` names each artifact as the cell traces do."""
    from transferdx.paper.tables import Study, TableInputs

    agree_path, match_path = analysis.agree_folder, analysis.match_folder
    table_studies = tuple(
        Study(
            st.backbone,
            rel(st.folder),
            st.study,
            st.profile,
            st.profile_json,
            _studies.read_negatives(st) if i == 0 else None,
        )
        for i, st in enumerate(studies)
    )
    agreement, uncertainty = agreement_for_tables(analysis.agreement, agree_path)
    matched_frame, balance = matching_for_tables(analysis.matching, match_path)
    return TableInputs(
        studies=table_studies,
        blocks={k: list(v) for k, v in settings.blocks.items()},
        diagnostics=dict(settings.diagnostics),
        agreement=agreement,
        agreement_file=rel(agree_path / "agreement.csv"),
        uncertainty=uncertainty,
        uncertainty_file=rel(agree_path / "transfer_uncertainty.json"),
        matched=matched_frame,
        balance=balance,
        match_folder=rel(match_path),
        runs=runs,
        base=dict(settings.sensitivity_base),
        stability_diagnostic=settings.stability_diagnostic,
        labels=dict(settings.labels),
        validation={b: dict(f) for b, f in analysis.validation.items()},
        validation_folder=rel(analysis.validation_folder),
    )


def write_tables(rendered: Mapping[str, PaperTable | str], folder: Path, formats: Sequence[str]) -> dict[str, str]:
    """Each rendered table in ``formats`` (``md``, ``tex``, ``csv``) with its cell trace, and all of
    them in ``tables.md``; returns name → reason for the tables not rendered."""
    from transferdx.paper.tables import PaperTable

    writers: dict[str, Callable[[PaperTable], str]] = {
        "md": PaperTable.to_markdown,
        "tex": PaperTable.to_latex,
        "csv": PaperTable.to_csv,
    }
    combined, skipped = [], {}
    for name, table in rendered.items():
        if isinstance(table, str):
            skipped[name] = table
            continue
        for fmt in formats:
            if fmt not in writers:
                raise ValueError(f"unknown table format {fmt!r}; valid: {sorted(writers)}")
            atomic_write_text(safe_join(folder, f"{name}.{fmt}"), writers[fmt](table))
        atomic_write_text(safe_join(folder, f"{name}.trace.csv"), csv_text(table.trace()))
        combined.append(table.to_markdown())
    if skipped:
        combined.append("Not rendered:\n\n" + "".join(f"- {k}: {v}\n" for k, v in skipped.items()))
    atomic_write_text(safe_join(folder, "tables.md"), "\n".join(combined))
    return skipped


def write_figures(artifacts: TableInputs, folder: Path) -> None:
    """The figures as ``folder/figures/<name>.png`` (a figure whose artifacts are missing is left out)."""
    from transferdx.paper.figures import FIGURES

    for name, plot in FIGURES.items():
        image = plot(artifacts)
        if image is not None:  # a figure whose artifacts are missing (the validation ladder)
            atomic_write_bytes(safe_join(folder, f"figures/{name}.png"), image)


def render_tables(
    study_dirs: Studies,
    out: str | Path,
    settings: AnalysisSettings | None = None,
    *,
    sensitivity_dirs: Sequence[str | Path] = (),
    agree_dir: str | Path | None = None,
    match_dir: str | Path | None = None,
) -> dict[str, Any]:
    """The study's tables (Markdown, LaTeX, CSV, each with a cell trace) and figures into ``out``,
    from study folders (or studies already read, :class:`StudyData`), optional sensitivity audits,
    and agreement/matching read from ``agree_dir``/``match_dir`` or computed, stored under ``out``
    and handed to the tables as computed. Returns name → table (a reason string for each table whose
    inputs are missing)."""
    from transferdx.paper.tables import TABLES, relative, render
    from transferdx.paper.validation_tables import VALIDATION_TABLES

    s = settings or AnalysisSettings()
    folder = Path(out)
    studies = as_studies(study_dirs)
    analysis = analyse_for_tables(studies, s, folder, agree_dir, match_dir)
    sens_paths = _studies.expand(list(sensitivity_dirs), "profile.json") if sensitivity_dirs else []
    inputs = [Path(st.folder) for st in studies] + [*sens_paths]
    inputs += [d for d, given in ((analysis.agree_folder, agree_dir), (analysis.match_folder, match_dir)) if given]
    root = Path(os.path.commonpath([str(p.resolve()) for p in inputs]))

    def rel(path: str | Path) -> str:
        """Inputs relative to their common root (manifest.json); the tables folder's own files as <tables>/…"""
        inside = Path(path).resolve().is_relative_to(folder.resolve())
        return "<tables>/" + relative(path, folder.resolve()) if inside else relative(path, root)

    runs = tuple(AuditRun(r.settings, r.profile, rel(r.folder)) for r in map(_studies.read_audit, sens_paths))
    artifacts = table_inputs(studies, s, analysis, runs, rel)
    sens = None
    if runs:
        sens = sensitivity(runs, artifacts.base, artifacts.blocks, artifacts.diagnostics, s.in_family)
        atomic_write_text(safe_join(folder, "sensitivity_runs.csv"), csv_text(sens))
    builders = {**TABLES, **VALIDATION_TABLES}
    rendered = render(artifacts, list(s.tables), sens, rel(folder / "sensitivity_runs.csv"), builders)
    skipped = write_tables(rendered, folder, s.formats)
    if s.figures:
        write_figures(artifacts, folder)
    # the root relative to the tables folder, so the same study gives the same bytes wherever it lives
    manifest = {
        "root": os.path.relpath(root, folder.resolve()),
        "inputs": sorted(rel(p) for p in inputs),
        "skipped": skipped,
    }
    atomic_write_text(safe_join(folder, "manifest.json"), canonical_json(manifest))
    return rendered
