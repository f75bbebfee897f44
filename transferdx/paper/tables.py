"""The study's Tables 1–10 (layouts of ``seeds/004``), regenerated from stored artifacts.

Builders are pure: they take the artifacts already read (:class:`TableInputs`) and return a
:class:`PaperTable` whose every number is a :class:`Cell` that names the artifact file and the row and
column it came from. Tables only format; the statistics are computed where the artifacts were
written (audit, evaluation, agreement, matching). ``TABLES`` registers the builders by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferdx.analysis.agreement import ordering
from transferdx.analysis.sensitivity import AuditRun, changed, find_base, kendall, value_range

SOURCE_NAMES = {"bm25": "BM25", "dense": "Dense", "llm": "LLM", "perturb": "Perturb"}
DATASET_NAMES = {
    "arguana": "ArguAna",
    "nfcorpus": "NFCorpus",
    "quora": "Quora",
    "scidocs": "SciDocs",
    "scifact": "SciFact",
    "trec-covid": "TREC COVID",
    "webis-touche2020": "Webis Touche",
    "fiqa": "FiQA",
    "nq": "NQ",
    "fever": "FEVER",
    "climate-fever": "Climate FEVER",
}


def source_label(source: str) -> str:
    """``bm25+dense`` → ``BM25+Dense``; ``easy_shuffled`` → ``Easy shuffled``."""
    return "+".join(SOURCE_NAMES.get(p, p.replace("_", " ").capitalize()) for p in source.split("+"))


@dataclass(frozen=True)
class Cell:
    """A number (or word) in a table and where it came from: ``artifact`` (a path relative to the
    inputs' root) and ``locator`` (the row selector and column inside it)."""

    value: Any
    artifact: str
    locator: str
    bold: bool = False
    digits: int | None = None
    suffix: str = ""


@dataclass(frozen=True)
class PaperTable:
    """A rendered table of the study (not an input table, :class:`transferdx.inputs.records.Table`):
    ``rows`` hold labels (str) and :class:`Cell`\\ s. The first ``groups`` columns are group labels,
    shown once per group in Markdown and LaTeX."""

    name: str
    caption: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    digits: int = 3
    groups: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def _text(self, item: Any, bold: str = "**{}**") -> str:
        if not isinstance(item, Cell):
            return str(item)
        text = _number(item.value, self.digits if item.digits is None else item.digits) + item.suffix
        return bold.format(text) if item.bold else text

    def _display(self, bold: str) -> list[list[str]]:
        out: list[list[str]] = []
        previous: list[Any] = [None] * self.groups
        for row in self.rows:
            cells = [self._text(c, bold) for c in row]
            shown = list(cells)
            for i in range(self.groups):
                if cells[: i + 1] == previous[: i + 1]:
                    shown[i] = ""
            previous = cells[: self.groups]
            out.append(shown)
        return out

    def to_markdown(self) -> str:
        lines = [f"**{self.name}.** {self.caption}", ""]
        lines.append("| " + " | ".join(self.columns) + " |")
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self._display("**{}**")]
        lines += [""] + [f"{n}" for n in self.notes] if self.notes else []
        return "\n".join(lines) + "\n"

    def to_latex(self) -> str:
        align = "l" * max(self.groups, 1) + "r" * (len(self.columns) - max(self.groups, 1))
        lines = [
            "\\begin{table}[t]",
            "\\centering",
            f"\\begin{{tabular}}{{{align}}}",
            "\\toprule",
            " & ".join(_latex(c) for c in self.columns) + " \\\\",
            "\\midrule",
        ]
        for row in self._display("\\textbf{{{}}}"):
            lines.append(" & ".join(_latex(c, keep_bold=True) for c in row) + " \\\\")
        caption = _latex(self.caption) + (" " + " ".join(_latex(n) for n in self.notes) if self.notes else "")
        lines += [
            "\\bottomrule",
            "\\end{tabular}",
            f"\\caption{{{caption}}}",
            f"\\label{{tab:{self.name.lower().replace(' ', '-')}}}",
            "\\end{table}",
        ]
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        """Full-precision values, every label repeated, no bold."""
        rows = [[_csv_value(c) for c in row] for row in self.rows]
        return pd.DataFrame(rows, columns=list(self.columns)).to_csv(index=False, lineterminator="\n")

    def trace(self) -> pd.DataFrame:
        """One row per number: table row (its labels), column, value, artifact and locator."""
        out = []
        for row in self.rows:
            first = next((i for i, c in enumerate(row) if isinstance(c, Cell)), len(row))
            labels = " / ".join(str(c) for c in row[:first])
            for column, item in zip(self.columns, row, strict=True):
                if isinstance(item, Cell):
                    out.append(
                        {
                            "row": labels,
                            "column": column,
                            "value": _csv_value(item),
                            "artifact": item.artifact,
                            "locator": item.locator,
                        }
                    )
        return pd.DataFrame(out, columns=["row", "column", "value", "artifact", "locator"])


def _number(value: Any, digits: int) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "n/a"
        text = f"{value:.{digits}f}"
        return "0." + "0" * digits if text == "-0." + "0" * digits else text
    return str(value)


def _csv_value(item: Any) -> str:
    if not isinstance(item, Cell):
        return str(item)
    v = item.value
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        return "" if math.isnan(v) else format(float(v), ".10g")
    return str(v)


# Longest first: a barred letter before the letter, the norm before its parts.
_LATEX_SYMBOLS = (
    ("ρ̄", "$\\bar{\\rho}$"),
    ("η̄", "$\\bar{\\eta}$"),
    ("ψ̄", "$\\bar{\\psi}$"),
    ("‖g‖²", "$\\|g\\|_2^2$"),
    ("ρ", "$\\rho$"),
    ("η", "$\\eta$"),
    ("ψ", "$\\psi$"),
    ("τ", "$\\tau$"),
    ("≤", "$\\leq$"),
    ("≥", "$\\geq$"),
    ("↑", "$\\uparrow$"),
    ("<", "$<$"),
    (">", "$>$"),
)
_LATEX_ESCAPES = {"\\": "\\textbackslash{}", "&": "\\&", "%": "\\%", "#": "\\#", "_": "\\_", "$": "\\$"}


def _latex(text: str, keep_bold: bool = False) -> str:
    if keep_bold and text.startswith("\\textbf{") and text.endswith("}"):
        return "\\textbf{" + _latex(text[len("\\textbf{") : -1]) + "}"
    out = "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)
    for k, v in _LATEX_SYMBOLS:
        out = out.replace(k, v)
    return out


# --------------------------------------------------------------------------------------------------
# The artifacts a table is built from


@dataclass(frozen=True)
class Study:
    """One backbone's study folder, read (see :func:`transferdx.analysis.studies.read_study`)."""

    backbone: str
    folder: str  # relative to the inputs' root
    results: pd.DataFrame  # study.csv: backbone, source, dataset, ndcg@10, ...
    profile: pd.DataFrame  # audit/profile.csv indexed by source
    profile_json: Mapping[str, Any]
    negatives: pd.DataFrame | None = None  # audit/negatives.csv


@dataclass(frozen=True)
class TableInputs:
    """Everything the tables read, plus the options that shape them."""

    studies: tuple[Study, ...]
    blocks: Mapping[str, Sequence[str]]
    diagnostics: Mapping[str, int]
    agreement: pd.DataFrame | None = None  # agreement.csv
    agreement_file: str = ""
    uncertainty: Mapping[str, Any] | None = None  # transfer_uncertainty.json
    uncertainty_file: str = ""
    matched: pd.DataFrame | None = None  # matched.csv
    balance: pd.DataFrame | None = None  # balance.csv
    match_folder: str = ""
    runs: tuple[AuditRun, ...] = ()  # sensitivity audits (folders relative to the root)
    base: Mapping[str, Any] = field(default_factory=dict)
    stability_diagnostic: str = "composite_logdet"
    labels: Mapping[str, str] = field(default_factory=dict)
    validation: Mapping[str, Mapping[str, pd.DataFrame]] = field(default_factory=dict)  # backbone → frames
    validation_folder: str = ""

    def label(self, name: str) -> str:
        return str(self.labels.get(name, name))

    def block_sources(self, present: Sequence[str]) -> list[tuple[str, list[str]]]:
        """(setting, its sources present in ``present``, in config order) for non-empty settings."""
        out = [(b, [s for s in members if s in present]) for b, members in self.blocks.items()]
        return [(b, m) for b, m in out if m]


def _setting_label(name: str) -> str:
    return name[:1].upper() + name[1:]


def _bold_max(rows: list[list[Any]], columns: Sequence[int], groups: Sequence[Any]) -> None:
    """Mark the largest value of each column within each group (rows sharing a group key)."""
    for key in dict.fromkeys(groups):
        members = [i for i, g in enumerate(groups) if g == key]
        for c in columns:
            values = [(rows[i][c].value, i) for i in members if isinstance(rows[i][c], Cell)]
            values = [(v, i) for v, i in values if isinstance(v, (int, float)) and not math.isnan(v)]
            if values:
                best = max(v for v, _ in values)
                for v, i in values:
                    if v == best:
                        rows[i][c] = Cell(**{**rows[i][c].__dict__, "bold": True})


def mean_ndcg(study: Study) -> dict[str, float]:
    """Mean nDCG@10 over datasets per source (the transfer outcome)."""
    return study.results.groupby("source")["ndcg@10"].mean().to_dict()


def _profile_cell(study: Study, source: str, column: str, **kw: Any) -> Cell:
    value = study.profile.loc[source, column] if column in study.profile.columns else float("nan")
    value = float(value) if isinstance(value, (int, float, np.number)) else value
    return Cell(value, f"{study.folder}/audit/profile.csv", f"source={source}; column={column}", **kw)


# --------------------------------------------------------------------------------------------------
# Tables 1–10


def transfer_ndcg(a: TableInputs) -> PaperTable:
    """Table 1: BEIR nDCG@10 per (backbone, setting, source) and dataset, with the mean over datasets."""
    datasets = list(dict.fromkeys(d for s in a.studies for d in s.results["dataset"]))
    rows, groups = [], []
    for study in a.studies:
        present = list(dict.fromkeys(study.results["source"]))
        for setting, members in a.block_sources(present):
            for source in members:
                sel = study.results[study.results["source"] == source]
                row: list[Any] = [a.label(study.backbone), _setting_label(setting), source_label(source)]
                for d in datasets:
                    hit = sel[sel["dataset"] == d]  # one row per training seed
                    value = float(hit["ndcg@10"].mean()) if len(hit) else float("nan")
                    where = f"source={source}; dataset={d}; column=ndcg@10"
                    row.append(
                        Cell(value, f"{study.folder}/study.csv", where + ("; mean over seeds" if len(hit) > 1 else ""))
                    )
                row.append(
                    Cell(
                        float(sel["ndcg@10"].mean()),
                        f"{study.folder}/study.csv",
                        f"source={source}; mean over datasets of ndcg@10",
                    )
                )
                rows.append(row)
                groups.append((study.backbone, setting))
    _bold_max(rows, range(3, 3 + len(datasets) + 1), groups)
    return PaperTable(
        "Table 1",
        "BEIR nDCG@10 after fine-tuning on each source. Grouped by backbone and setting; Mean averages the "
        "listed datasets. Bold marks the best score within each block and column.",
        ("Model", "Setting", "Mining", *(DATASET_NAMES.get(d, d) for d in datasets), "Mean"),
        tuple(tuple(r) for r in rows),
        groups=2,
    )


def psi_and_transfer(a: TableInputs) -> PaperTable:
    """Table 2: Mean ψ per source and mean nDCG@10 per backbone."""
    first = a.studies[0]
    means = [mean_ndcg(study) for study in a.studies]
    rows = []
    for _, members in a.block_sources(list(first.profile.index)):
        for source in members:
            row: list[Any] = [source_label(source), _profile_cell(first, source, "psi_mean")]
            for study, mean in zip(a.studies, means, strict=True):
                row.append(
                    Cell(
                        mean.get(source, float("nan")),
                        f"{study.folder}/study.csv",
                        f"source={source}; mean over datasets of ndcg@10",
                    )
                )
            rows.append(row)
    return PaperTable(
        "Table 2",
        f"Lexical residuality and mean BEIR nDCG@10. Mean ψ from the {a.label(first.backbone)} study audit; "
        "one nDCG@10 column per backbone. Compare within each setting.",
        ("Source", "Mean ψ", *(a.label(s.backbone) for s in a.studies)),
        tuple(tuple(r) for r in rows),
    )


def _block_rows(
    a: TableInputs, columns: Sequence[tuple[str, int]]
) -> tuple[list[list[Any]], list[Any], list[tuple[Study, str]]]:
    """Rows (backbone, setting, source, profile columns) of every trained source, their bold groups,
    and the (study, source) each row is about."""
    rows, groups, about = [], [], []
    for study in a.studies:
        trained = set(study.results["source"])
        for setting, members in a.block_sources([s for s in study.profile.index if s in trained]):
            for source in members:
                row: list[Any] = [a.label(study.backbone), _setting_label(setting), source_label(source)]
                row += [_profile_cell(study, source, c, digits=d) for c, d in columns]
                rows.append(row)
                groups.append((study.backbone, setting))
                about.append((study, source))
    return rows, groups, about


def frozen_diagnostics(a: TableInputs) -> PaperTable:
    """Table 3: Frozen target-backbone diagnostics: composite, gradient energy, MNRL proxy, any-of-K inversion."""
    rows, groups, _ = _block_rows(
        a, [("composite_logdet", 4), ("energy_mean", 2), ("loss_mean", 3), ("inversion_rate", 3)]
    )
    _bold_max(rows, range(3, 7), groups)
    return PaperTable(
        "Table 3",
        "Frozen target-backbone diagnostics per source. Composite is the log-det form; ‖g‖² is the mean "
        "per-record gradient energy; MNRL proxy is the mean loss on explicit negatives; ambiguity is the "
        "record-level any-of-K inversion rate. Bold marks column maxima within backbone and setting.",
        ("Model", "Setting", "Source", "Composite", "Mean ‖g‖²", "MNRL proxy", "Ambiguity (any-of-K)"),
        tuple(tuple(r) for r in rows),
        groups=2,
    )


DIAGNOSTIC_NAMES = {
    "psi_mean": "Mean ψ only",
    "rho_mean": "Mean ρ only",
    "eta_mean": "Mean η only",
    "inversion_rate": "Inversion rate",
    "composite_logdet": "Combined attributes (log-det)",
    "composite_trace": "Trace form",
}


def controls_below(profile: pd.DataFrame, column: str, direction: int) -> bool | None:
    """Whether every control ranks below every genuine source by ``direction × column`` (None when
    the profile has no controls or no genuine sources)."""
    if column not in profile.columns:
        return None
    kind = profile["kind"].astype(str)
    genuine = direction * profile.loc[kind == "genuine", column].astype(float)
    controls = direction * profile.loc[kind == "control", column].astype(float)
    if not len(genuine) or not len(controls):
        return None
    return bool(controls.max() < genuine.min())


def rank_agreement_summary(a: TableInputs) -> PaperTable:
    """Table 4: Per diagnostic: control criterion per backbone, blocks recovered k/n, source pairs the diagnostic
    ties (summed over blocks; "n/a" for an agreement table without the ``ties`` column), mean Pearson
    r per setting."""
    if a.agreement is None:
        raise ValueError("Table 4 needs the agreement (agree_dir, or study_dirs to compute it)")
    agr = a.agreement
    settings = list(a.blocks)
    rows = []
    for name, direction in a.diagnostics.items():
        mine = agr[agr["diagnostic"] == name]
        if not len(mine):
            continue
        crit = [controls_below(s.profile, name, direction) for s in a.studies]
        criterion = "/".join("n/a" if c is None else ("yes" if c else "no") for c in crit)
        row: list[Any] = [
            DIAGNOSTIC_NAMES.get(name, name),
            Cell(criterion, ";".join(f"{s.folder}/audit/profile.csv" for s in a.studies), f"kind, {name}"),
            Cell(
                f"{int(mine['recovered'].sum())}/{len(mine)}",
                a.agreement_file,
                f"diagnostic={name}; sum of recovered / rows",
            ),
            Cell(
                int(mine["ties"].sum()) if "ties" in mine.columns else "n/a",
                a.agreement_file,
                f"diagnostic={name}; sum of ties",
            ),
        ]
        for setting in settings:
            part = mine[mine["block"].str.endswith(f"/{setting}")]
            row.append(
                Cell(
                    float(part["pearson"].mean()) if len(part) else float("nan"),
                    a.agreement_file,
                    f"diagnostic={name}; block=*/{setting}; mean of pearson over backbones",
                    digits=2,
                )
            )
        rows.append(row)
    return PaperTable(
        "Table 4",
        "Component and weighting comparisons. Blocks counts complete transfer orderings recovered. Ties counts "
        "the pairs of sources a diagnostic gives equal values, summed over blocks; a tied pair counts as "
        "recovered only where transfer ties it too. r is the "
        "Pearson correlation with mean BEIR nDCG@10 within each backbone and setting, averaged across "
        "backbones. The control criterion (one entry per backbone: "
        + "/".join(a.label(s.backbone) for s in a.studies)
        + ") requires every control to rank below every genuine source.",
        ("Variant", "Criterion", "Blocks", "Ties", *(f"r ({_setting_label(s)})" for s in settings)),
        tuple(tuple(r) for r in rows),
    )


def composite_ranking(a: TableInputs, column: str = "composite_logdet") -> PaperTable:
    """Table 5: Every audited source ranked by the combined attribute score, rank in parentheses."""
    first = a.studies[0]
    if column not in first.profile.columns:
        raise ValueError(f"Table 5 needs {column} in the audit profile (semantic diagnostics)")
    ranks = {}
    for study in a.studies:
        values = study.profile[column].astype(float)
        ranks[study.backbone] = {s: i + 1 for i, s in enumerate(ordering(values.to_dict()))}
    rows = []
    for source in sorted(first.profile.index, key=lambda s: ranks[first.backbone][s]):
        row: list[Any] = [source_label(source)]
        for study in a.studies:
            if source not in study.profile.index:
                row.append("")
                continue
            cell = _profile_cell(study, source, column)
            row.append(Cell(cell.value, cell.artifact, cell.locator, suffix=f" ({ranks[study.backbone][source]})"))
        rows.append(row)
    n = len(first.profile.index)
    return PaperTable(
        "Table 5",
        f"Sources ranked by the combined attribute score (log-det composite), with rank out of {n} in "
        "parentheses; genuine sources and controls together.",
        ("Source", *(a.label(s.backbone) for s in a.studies)),
        tuple(tuple(r) for r in rows),
    )


def audit_profile_flags(a: TableInputs) -> PaperTable:
    """Table 6: The audit profile with flags, every source, per backbone."""
    rows = []
    notes = []
    for study in a.studies:
        in_blocks = [s for _, members in a.block_sources(list(study.profile.index)) for s in members]
        for source in [*in_blocks, *(s for s in study.profile.index if s not in in_blocks)]:
            flags = study.profile.loc[source, "flags"] if "flags" in study.profile.columns else ""
            flags = "none" if not isinstance(flags, str) or not flags else flags.replace(";", ", ")
            rows.append(
                [
                    a.label(study.backbone),
                    source_label(source),
                    _profile_cell(study, source, "rho_mean"),
                    _profile_cell(study, source, "eta_mean"),
                    _profile_cell(study, source, "psi_mean"),
                    _profile_cell(study, source, "inversion_rate"),
                    Cell(flags, f"{study.folder}/audit/profile.csv", f"source={source}; column=flags"),
                ]
            )
        t = study.profile_json.get("flag_thresholds", {})
        if t:
            shown = ", ".join(f"{k} {_number(float(v), 3)}" for k, v in t.items() if isinstance(v, (int, float)))
            notes.append(f"{a.label(study.backbone)} thresholds ({t.get('mode', '')}): {shown}.")
    return PaperTable(
        "Table 6",
        "The audit profile on every source. Flag if mean ρ, η or ψ exceeds its threshold, or the inversion "
        "rate is below its threshold.",
        ("Model", "Source", "ρ̄", "η̄", "ψ̄", "inv.", "Flags"),
        tuple(tuple(r) for r in rows),
        groups=1,
        notes=tuple(notes),
    )


def composite_per_dimension(a: TableInputs) -> PaperTable:
    """Table 7: In-family composite and composite per embedding dimension."""
    rows, groups, about = _block_rows(a, [("composite_logdet", 4)])
    for row, (study, source) in zip(rows, about, strict=True):
        profile = study.profile
        dim = float(profile.loc[source, "embedding_dim"]) if "embedding_dim" in profile.columns else float("nan")
        row.append(
            Cell(row[3].value / dim, row[3].artifact, f"source={source}; composite_logdet / embedding_dim", digits=6)
        )
    _bold_max(rows, range(3, 5), groups)
    return PaperTable(
        "Table 7",
        "Training-free composite (log-det form) computed in family, with a frozen copy of the backbone that is "
        "later fine-tuned, over all explicit negatives of each source; and per embedding dimension. Bold marks "
        "the best score within each block.",
        ("Model", "Setting", "Mining method", "Composite ↑", "Composite / dim. ↑"),
        tuple(tuple(r) for r in rows),
        groups=2,
    )


def _sensitivity_base(a: TableInputs, name: str) -> AuditRun:
    if not a.runs:
        raise ValueError(f"{name} needs sensitivity audits (sensitivity_dirs)")
    return find_base(a.runs, a.base)


def sample_fraction_stability(a: TableInputs) -> PaperTable:
    """Table 8: Kendall τ between each sample fraction's ordering and the full-sample ordering, per setting."""
    base = _sensitivity_base(a, "Table 8")
    runs = sorted(
        (r for r in a.runs if r is base or set(changed(r, base)) == {"sample_fraction"}),
        key=lambda r: float(r.factor("sample_fraction")),
    )
    column = a.stability_diagnostic
    fractions = [float(r.factor("sample_fraction")) for r in runs]
    blocks = [(b, m) for b, m in a.block_sources(list(base.profile.index)) if len(m) >= 2]
    full = {b: {s: float(base.profile.loc[s, column]) for s in present} for b, present in blocks}
    rows = []
    for setting, present in blocks:
        row: list[Any] = [_setting_label(setting)]
        for run in runs:
            values = {s: float(run.profile.loc[s, column]) for s in present if s in run.profile.index}
            row.append(
                Cell(
                    kendall(values, full[setting]),
                    f"{run.folder}/profile.csv",
                    f"Kendall tau of {column} over {'/'.join(present)} against {base.folder}/profile.csv",
                )
            )
        rows.append(row)
    direction = a.diagnostics.get(column, 1)
    orders = "; ".join(
        f"{_setting_label(b)}: " + " > ".join(source_label(s) for s in ordering(full[b], direction)) for b, _ in blocks
    )
    return PaperTable(
        "Table 8",
        f"Rank stability as sampled queries increase, using {column}: Kendall τ with the full-sample "
        f"ordering ({orders}); 1.000 denotes exact agreement.",
        ("Setting", *(f"{round(100 * f)}%" for f in fractions)),
        tuple(tuple(r) for r in rows),
    )


def tokenizer_idf_sensitivity(a: TableInputs) -> PaperTable:
    """Table 9: Tokenizer and IDF-corpus sensitivity: base composite, ranges one factor at a time, C and ψ."""
    base = _sensitivity_base(a, "Table 9")
    column = a.stability_diagnostic
    rows = []
    artifact = f"{base.folder}/profile.csv"
    for setting, members in a.block_sources(list(base.profile.index)):
        for source in members:
            row: list[Any] = [_setting_label(setting), source_label(source)]
            row.append(
                Cell(float(base.profile.loc[source, column]), artifact, f"source={source}; column={column}", digits=4)
            )
            for factor in ("tokenizer", "idf_corpus"):
                lo, hi = value_range(a.runs, base, factor, source, column)
                row.append(
                    Cell(
                        f"{_number(lo, 4)} to {_number(hi, 4)}",
                        "sensitivity runs",
                        f"source={source}; min/max of {column} over runs changing only {factor}",
                    )
                )
            row.append(
                Cell(
                    float(base.profile.loc[source, "coverage_mean"]), artifact, f"source={source}; column=coverage_mean"
                )
            )
            row.append(Cell(float(base.profile.loc[source, "psi_mean"]), artifact, f"source={source}; column=psi_mean"))
            rows.append(row)
    settings = ", ".join(f"{k}={base.factor(k)}" for k in ("tokenizer", "idf_corpus", "backbone"))
    return PaperTable(
        "Table 9",
        f"Tokenizer and IDF-corpus sensitivity for ψ through the composite. Base: {settings}. Ranges vary one "
        "factor at a time.",
        ("Setting", "Source", "Base composite", "Tokenizer range", "IDF range", "Mean C", "Mean ψ"),
        tuple(tuple(r) for r in rows),
        groups=1,
    )


BUCKETS: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    "ρ < 0.5": lambda n: n["rho"] < 0.5,
    "η ≤ 0.25": lambda n: n["eta"] <= 0.25,
    "C ≥ 0.50": lambda n: n["coverage"] >= 0.5,
    "Valid high-C": lambda n: (n["coverage"] >= 0.5) & (n["judgment"].fillna(0) > 0),
    "Valid low-η": lambda n: (n["eta"] <= 0.25) & (n["judgment"].fillna(0) > 0),
}


def failure_buckets(a: TableInputs) -> PaperTable:
    """Table 10: Failure-bucket rates (percent of explicit negatives); 'valid' = judged relevant (a false negative)."""
    study = a.studies[0]
    if study.negatives is None or "rho" not in study.negatives.columns:
        raise ValueError("Table 10 needs audit/negatives.csv with the semantic columns")
    neg = study.negatives
    rows = []
    artifact = f"{study.folder}/audit/negatives.csv"
    for setting, members in a.block_sources(list(dict.fromkeys(neg["source"]))):
        for source in members:
            part = neg[neg["source"] == source]
            judged = part["judgment"].notna().any()
            row: list[Any] = [_setting_label(setting), source_label(source)]
            for name, rule in BUCKETS.items():
                if name.startswith("Valid") and not judged:
                    row.append(Cell("not measured", artifact, f"source={source}; no judged negatives"))
                    continue
                row.append(
                    Cell(
                        100.0 * float(rule(part).mean()),
                        artifact,
                        f"source={source}; percent of rows with {name}",
                        digits=1,
                    )
                )
            rows.append(row)
    return PaperTable(
        "Table 10",
        f"Failure-bucket rates for η and ψ as percentages of explicit negatives ({a.label(study.backbone)} "
        "audit). Valid: the negative is judged relevant (a false negative); not measured where no negative "
        "of the source is judged.",
        ("Setting", "Source", *BUCKETS),
        tuple(tuple(r) for r in rows),
        groups=1,
    )


def family_shown(row: Mapping[str, Any]) -> bool:
    """Whether a sensitivity row changes the encoder and knows the trained backbone."""
    return "backbone" in str(row["factor"]).split("+") and bool(row["family"])


def sensitivity_table(a: TableInputs, frame: pd.DataFrame, artifact: str) -> PaperTable:
    """All sensitivity runs in one table: factor, value, setting, diagnostic, ordering, Kendall τ."""
    rows = []
    for i, r in frame.iterrows():
        rows.append(
            [
                r["factor"],
                str(r["value"]) + (f" ({r['family']}-family)" if family_shown(r) else ""),
                _setting_label(r["block"]),
                r["diagnostic"],
                " > ".join(source_label(s) for s in r["ordering"].split(">")),
                Cell(float(r["kendall_tau"]), artifact, f"row {i}; column=kendall_tau"),
                Cell(bool(r["same_ordering"]), artifact, f"row {i}; column=same_ordering"),
            ]
        )
    return PaperTable(
        "Sensitivity",
        "Every sensitivity run against the base run: the factor it changes, the diagnostic's ordering of "
        "each setting's sources, Kendall τ with the base run's values, and whether the ordering is the same.",
        ("Factor", "Value", "Setting", "Diagnostic", "Ordering", "Kendall τ", "Same ordering"),
        tuple(tuple(r) for r in rows),
        groups=2,
    )


def uncertainty_table(a: TableInputs) -> PaperTable:
    """How sure the transfer ordering itself is: paired-bootstrap probabilities per block."""
    if not a.uncertainty:
        raise ValueError("the uncertainty table needs transfer_uncertainty.json (agree_dir)")
    rows = []
    for block, u in a.uncertainty.items():
        pairs = "; ".join(f"P({k.replace('>', ' > ')}) = {v:.3f}" for k, v in u["pairwise"].items())
        rows.append(
            [
                block,
                " > ".join(source_label(s) for s in u["ordering"]),
                Cell(float(u["p_full_ordering"]), a.uncertainty_file, f"{block}.p_full_ordering"),
                Cell(pairs, a.uncertainty_file, f"{block}.pairwise"),
            ]
        )
    return PaperTable(
        "Transfer uncertainty",
        "Paired bootstrap over each dataset's queries: probability of the observed full transfer ordering and "
        "of each pairwise ordering.",
        ("Block", "Transfer ordering", "P(full ordering)", "Pairwise"),
        tuple(tuple(r) for r in rows),
    )


def matching_table(a: TableInputs) -> PaperTable:
    """Share of ψ-matched repetitions reproducing the transfer ordering, per statistic and resolution."""
    if a.matched is None or a.balance is None or not len(a.matched):
        raise ValueError("the matching table needs matched.csv and balance.csv (match_dir)")
    keys = ["backbone", "block", "statistic", "resolution"]
    shares = a.matched.groupby(keys, sort=False)["share_reproducing"].first()
    rows = []
    for (backbone, block, statistic, resolution), share in shares.items():
        bal = a.balance[
            (a.balance["backbone"] == backbone)
            & (a.balance["block"] == block)
            & (a.balance["resolution"] == resolution)
        ]
        where = f"backbone={backbone}; block={block}"
        rows.append(
            [
                f"{a.label(backbone)} / {_setting_label(block)}",
                statistic,
                str(resolution),
                Cell(
                    float(share),
                    f"{a.match_folder}/matched.csv",
                    f"{where}; statistic={statistic}; resolution={resolution}",
                ),
                Cell(
                    float(bal["smd_before"].iloc[0]),
                    f"{a.match_folder}/balance.csv",
                    f"{where}; resolution={resolution}; smd_before",
                ),
                Cell(
                    float(bal["smd_after_mean"].iloc[0]),
                    f"{a.match_folder}/balance.csv",
                    f"{where}; resolution={resolution}; smd_after_mean",
                ),
            ]
        )
    return PaperTable(
        "Matching",
        "ψ-matched samples: share of repetitions whose matched means reproduce the transfer ordering, and ψ "
        "balance (largest pairwise standardized mean difference) before and after matching.",
        ("Block", "Statistic", "Bins", "Share reproducing", "ψ SMD before", "ψ SMD after"),
        tuple(tuple(r) for r in rows),
        groups=2,
    )


# The paper's table number (the output file name) → the builder, named after what it shows.
TABLES: dict[str, Callable[[TableInputs], PaperTable]] = {
    "table1": transfer_ndcg,
    "table2": psi_and_transfer,
    "table3": frozen_diagnostics,
    "table4": rank_agreement_summary,
    "table5": composite_ranking,
    "table6": audit_profile_flags,
    "table7": composite_per_dimension,
    "table8": sample_fraction_stability,
    "table9": tokenizer_idf_sensitivity,
    "table10": failure_buckets,
    "uncertainty": uncertainty_table,
    "matching": matching_table,
}


def render(
    a: TableInputs,
    names: Sequence[str],
    sensitivity: pd.DataFrame | None = None,
    sensitivity_file: str = "",
    builders: Mapping[str, Callable[[TableInputs], PaperTable]] | None = None,
) -> dict[str, PaperTable | str]:
    """Build the named tables (``builders``: name → builder, default :data:`TABLES`); a table whose
    artifacts are missing maps to the reason (a string)."""
    builders = TABLES if builders is None else builders
    out: dict[str, PaperTable | str] = {}
    for name in names:
        if name == "sensitivity":
            if sensitivity is None or not len(sensitivity):
                out[name] = "needs sensitivity audits (sensitivity_dirs)"
            else:
                out[name] = sensitivity_table(a, sensitivity, sensitivity_file)
            continue
        if name not in builders:
            raise ValueError(f"unknown table {name!r}; valid: {[*sorted(builders), 'sensitivity']}")
        try:
            out[name] = builders[name](a)
        except (ValueError, KeyError) as exc:
            out[name] = str(exc)
    return out


def relative(path: str | Path, root: Path) -> str:
    """``path`` relative to ``root`` (POSIX separators), for traces that read the same anywhere."""
    return Path(path).resolve().relative_to(root).as_posix()
