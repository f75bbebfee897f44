"""Hydra config → the library's typed settings. The only module that reads a ``DictConfig``;
everything it returns is plain Python that the verbs of :mod:`transferdx.pipeline` take (what a run
reads: :class:`~transferdx.pipeline.InputSettings`, for :func:`transferdx.pipeline.load_inputs`).
It loads nothing and builds nothing itself."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from transferdx.artifacts import run_id
from transferdx.presets import config_dir

# The library's settings are imported where they are built, not here: the command line's error
# exits import this module (its resolvers name the run folder) and should not pay for pandas or torch.
if TYPE_CHECKING:
    from transferdx.auditing.values import SemanticSettings
    from transferdx.diagnostics.composite import CompositeSettings
    from transferdx.diagnostics.suspicion import SuspicionSettings
    from transferdx.embed import EmbeddingCache, EncoderSpec
    from transferdx.pipeline.auditing import PreparedAudit
    from transferdx.pipeline.settings import AnalysisSettings, AuditOptions, BenchmarkSettings, InputSettings
    from transferdx.training import TrainSettings

__all__ = ["config_dir"]


def plain_config(node: Any) -> Any:
    """A config node as plain dicts and lists, interpolations resolved."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


# ---------------------------------------------------------------------------------------------
# Run folders: the resolvers conf/*.yaml name in their ``hydra:`` blocks
# ---------------------------------------------------------------------------------------------


class OutputDirError(ValueError):
    """``output_dir=`` cannot be a run folder (it names an existing file)."""


def explicit_output_dir(root: Any) -> str | None:
    """``output_dir`` when the command line or a config sets it; None while it is the default, Hydra's
    own run folder (``${hydra:runtime.output_dir}``). Read without resolving that default, which is
    not known yet when Hydra picks its run folder."""
    if not isinstance(root, DictConfig):
        return None
    node: Any = root._get_node("output_dir", throw_on_missing_key=False)
    if node is None or node._is_missing():
        return None
    raw = node._value()
    if raw is None or (isinstance(raw, str) and "hydra:runtime.output_dir" in raw):
        return None
    return str(root.output_dir)


# Explicit output folders that did not exist before this process picked them as its run folder: a
# run that fails before writing anything removes them again (cli), leaving nothing behind.
NEW_OUTPUT_DIRS: set[Path] = set()


def _run_dir(default: str, *, _root_: Any) -> str:
    """``hydra.run.dir``: the explicit ``output_dir`` (so that Hydra makes no other folder), else
    ``default`` (``<output_root>/<verb>/<run id>``)."""
    explicit = explicit_output_dir(_root_)
    if explicit is None:
        return default
    if Path(explicit).exists() and not Path(explicit).is_dir():
        raise OutputDirError(f"output_dir={explicit} is an existing file; output_dir= names a folder (made if missing)")
    if not Path(explicit).exists():
        NEW_OUTPUT_DIRS.add(Path(explicit).absolute())
    return explicit


def _unless_output_dir(value: Any, *, _root_: Any) -> Any:
    """``hydra.output_subdir``: ``value`` (``.hydra``) in a run folder of Hydra's, none in an explicit
    ``output_dir``, which holds the run's artifacts only."""
    return None if explicit_output_dir(_root_) is not None else value


def _log_file(value: str, *, _root_: Any) -> str:
    """The job log file: ``value`` (``<run folder>/<job>.log``), the null device with an explicit
    ``output_dir`` (the log goes to the console only)."""
    return os.devnull if explicit_output_dir(_root_) is not None else value


def register_resolvers() -> None:
    """``tdx_run_id`` (cached per config, like Hydra's ``now``, so a sweep's jobs agree on it),
    ``tdx_run_dir``, ``tdx_unless_output_dir`` and ``tdx_log_file``."""
    OmegaConf.register_new_resolver("tdx_run_id", run_id, use_cache=True, replace=True)
    OmegaConf.register_new_resolver("tdx_run_dir", _run_dir, replace=True)
    OmegaConf.register_new_resolver("tdx_unless_output_dir", _unless_output_dir, replace=True)
    OmegaConf.register_new_resolver("tdx_log_file", _log_file, replace=True)


register_resolvers()


# ---------------------------------------------------------------------------------------------
# Checks that turn a bad setting into a one-line error before any work
# ---------------------------------------------------------------------------------------------

OFFLINE_ADVICE = (
    "use an offline preset (backbone=minilm_l6 or backbone=mpnet_base) or a model folder"
    " (backbone.model=/path/to/model)"
)


def input_path(cfg: DictConfig) -> str | None:
    """``input``: one records file or folder, or None."""
    value = cfg.get("input")
    if value is None or value == "":
        return None
    if OmegaConf.is_config(value):
        raise ValueError(
            f"input= takes one path (a records file or a folder of them), got {plain_config(value)!r}: put the files in"
            " one folder and give input=<folder>; a path with a comma needs quotes, e.g. 'input=\"a,b.jsonl\"'"
        )
    return str(value)


def _hub_offline() -> bool:
    from huggingface_hub import constants

    offline = getattr(constants, "is_offline_mode", None)
    return bool(offline() if callable(offline) else constants.HF_HUB_OFFLINE)


def check_hub_model(
    model: str, revision: str | None = None, what: str = "backbone", advice: str = OFFLINE_ADVICE
) -> None:
    """Fail fast, in one line, when hub model ``model`` is neither in the local Hugging Face cache nor
    reachable (offline mode, no network, no such model), instead of the loader's retries (over a
    minute without a network) and its traceback."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        snapshot_download(model, revision=revision, local_files_only=True)
        return
    except Exception:  # not cached (or not a valid id): ask the hub below
        pass
    if _hub_offline():
        raise ValueError(
            f"{what}: hub model {model!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: {advice}"
        )
    try:
        HfApi().model_info(model, revision=revision, timeout=10)
    except GatedRepoError:
        return  # exists; the loader uses the token
    except RepositoryNotFoundError:
        raise ValueError(f"{what}: no model {model!r} on the Hugging Face Hub; {advice}") from None
    except RevisionNotFoundError:
        raise ValueError(f"{what}: hub model {model!r} has no revision {revision!r}") from None
    except HfHubHTTPError:
        return  # the hub answered (rate limit, outage, auth): the loader says more
    except Exception as exc:  # connection refused, no DNS, timeout, offline mode
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"{what}: hub model {model!r} is not in the local Hugging Face cache and the hub cannot be reached"
            f" ({reason}): {advice}"
        ) from None


def check_encoder(spec: EncoderSpec) -> EncoderSpec:
    """``spec``, after :func:`check_hub_model` for a hub encoder."""
    if spec.source == "hub":
        check_hub_model(spec.model, spec.revision, f"backbone {spec.name!r}")
    return spec


def tokenizer_options(cfg: DictConfig) -> dict[str, Any]:
    """The ``tokenizer`` group's options; ``model_name_or_path`` of the ``backbone`` tokenizer must
    name a folder, or a hub model that is cached or reachable."""
    options = {k: v for k, v in plain_config(cfg.tokenizer).items() if k != "name"}
    location = options.get("model_name_or_path")
    if cfg.tokenizer.name == "backbone" and location:
        location = str(location)
        path_like = Path(location).is_absolute() or location.startswith((".", "~")) or location.count("/") > 1
        if Path(location).expanduser().is_dir():
            options["model_name_or_path"] = str(Path(location).expanduser())
        elif not path_like and "\\" not in location:  # 'org/name', or a legacy id such as 'bert-base-uncased'
            advice = "give a tokenizer folder, or tokenizer.model_name_or_path=null for the bundled MiniLM tokenizer"
            check_hub_model(location, what="tokenizer.model_name_or_path", advice=advice)
        else:
            raise ValueError(
                f"tokenizer.model_name_or_path={location}: no such folder; give a tokenizer or model folder, a hub"
                " id 'org/name', or null for the bundled MiniLM tokenizer"
            )
    return options


def data_options(cfg: DictConfig) -> tuple[str, dict[str, Any]]:
    """(format, options) of the ``data`` group, ``slice`` renamed to the readers' ``slice_spec``."""
    missing = [str(k) for k in cfg.data if OmegaConf.is_missing(cfg.data, str(k))]
    if missing:
        needed = " ".join(f"data.{k}=..." for k in missing)
        raise ValueError(f"data={cfg.data.get('name', '?')} needs {needed} (see conf/data/{cfg.data.get('name')}.yaml)")
    options: dict[str, Any] = dict(plain_config(cfg.data))
    options.pop("name", None)
    fmt = options.pop("format")
    if "slice" in options:
        options["slice_spec"] = options.pop("slice")
    return fmt, options


# the options of the data presets that name a file or folder (made absolute in :func:`read_with`)
DATA_PATH_OPTIONS = frozenset({"path", "root", "collection", "corpus", "queries", "qrels", "topics"})


def read_with(cfg: DictConfig) -> dict[str, Any]:
    """The command-line settings a later command (the ``transferdx-clean`` the audit prints) needs to
    read the same input as this run, so that it runs as printed from any folder: ``input`` as an
    absolute path (a Hub dataset, ``hf:…``, as given: :func:`~transferdx.inputs.hub.absolute_hub_spec`);
    else ``data`` (the preset's name) with each ``data.*`` value the command line changed, and each
    path the preset gives relative to the working folder, absolute; ``diagnostics: lexical`` for a run
    without the encoder. ``on_error`` is an audit setting of its own."""
    from transferdx.inputs.hub import absolute_hub_spec, is_hub_spec
    from transferdx.presets import read_preset

    out: dict[str, Any] = {}
    if (path := input_path(cfg)) and is_hub_spec(path):
        out["input"] = absolute_hub_spec(path)  # a Hub dataset as given (a local repository folder, absolute)
    elif path:
        out["input"] = str(Path(path).resolve())
    else:
        data_options(cfg)  # a value the preset leaves to the command line is named there first
        name = str(cfg.data.get("name"))
        try:
            preset = read_preset("data", name)
        except ValueError:
            preset = {}
        raw, values = OmegaConf.to_container(cfg.data, resolve=False), plain_config(cfg.data)
        assert isinstance(raw, dict)
        out["data"] = name
        for key, value in values.items():
            if key == "name":
                continue
            # a Hub dataset (hf:…) is no path: as given, a local repository folder made absolute
            if key in DATA_PATH_OPTIONS and is_hub_spec(value):
                out[f"data.{key}"] = absolute_hub_spec(value)
                continue
            is_path = key in DATA_PATH_OPTIONS and isinstance(value, str) and value != ""
            relative = is_path and not Path(value).is_absolute()
            if raw.get(key) != preset.get(key, object()) or relative:
                out[f"data.{key}"] = str(Path(value).resolve()) if relative else value
    if not cfg.diagnostics.semantic:
        out["diagnostics"] = "lexical"
    return out


def controls(cfg: DictConfig) -> list[str]:
    """``controls``: ``all``, ``none`` or a list of names."""
    from transferdx.sources.controls import CONTROLS

    if cfg.controls in ("all", "none", None):
        return list(CONTROLS) if cfg.controls == "all" else []
    return [str(c) for c in cfg.controls]


def self_controls(cfg: DictConfig) -> str | list[str]:
    """Controls the audit builds from an ``input=`` file itself: ``auto`` by default (``controls: all``),
    ``none`` with ``controls=none`` or ``[]``, else the listed ones; never for other ``data``."""
    if not input_path(cfg):
        return "none"
    if cfg.get("controls", "all") == "all":
        return "auto"
    return controls(cfg) or "none"


def backbone_spec(cfg: DictConfig) -> EncoderSpec:
    """The ``backbone`` group as a spec; ``backbone.model=<folder or org/name>`` alone infers the source."""
    from transferdx.embed import EncoderSpec, with_inferred_source

    return with_inferred_source(EncoderSpec.from_config(plain_config(cfg.backbone)))


def needs_encoder(cfg: DictConfig) -> bool:
    """Whether a run needs the frozen encoder: semantic diagnostics, or dense/neighbour building."""
    from transferdx.inputs.registry import is_query_set

    fmt, _ = data_options(cfg)
    if cfg.diagnostics.semantic:
        return True
    if not is_query_set(fmt) or input_path(cfg):
        return False
    return "neighbor_positive" in controls(cfg) or any("dense" in s.split("+") for s in cfg.sources)


def audit_spec(cfg: DictConfig) -> EncoderSpec:
    """The audit's (and the sources' builder's) frozen encoder: the ``audit_backbone`` preset when a
    study names one (a backbone trained on sources audited by another encoder), else the backbone."""
    name = cfg.get("audit_backbone")
    if not name:
        return backbone_spec(cfg)
    from transferdx.embed import EncoderSpec, with_inferred_source
    from transferdx.presets import read_preset

    return with_inferred_source(EncoderSpec.from_config(read_preset("backbone", str(name))))


def build_encoder(cfg: DictConfig) -> EmbeddingCache | None:
    """The frozen encoder with its embedding cache, or None when the run needs none."""
    from transferdx.embed import EmbeddingCache

    if not needs_encoder(cfg):
        return None
    return EmbeddingCache(check_encoder(audit_spec(cfg)), Path(str(cfg.paths.cache_dir)))


def input_settings(cfg: DictConfig) -> InputSettings:
    """What a run reads: ``input`` (a records file or folder), else the ``data`` group's reader and
    its options, with the ``build`` group's sources, controls, k, slice, BM25 settings, control
    parent and ``external_sources`` (for a query set); ``on_error``, ``seed``."""
    from transferdx.pipeline.settings import InputSettings

    fmt, options = data_options(cfg)
    return InputSettings(
        path=input_path(cfg),
        format=fmt,
        options=options,
        sources=[str(s) for s in cfg.sources],
        controls=controls(cfg),
        k=int(cfg.k),
        slice=plain_config(cfg.get("slice")),
        seed=int(cfg.seed),
        bm25=dict(cfg.bm25),
        control_parent=cfg.get("control_parent"),
        external_sources={str(k): str(v) for k, v in (cfg.get("external_sources") or {}).items()},
        on_error=str(cfg.on_error),
    )


def semantic_settings(cfg: DictConfig) -> SemanticSettings:
    from transferdx.auditing.values import SemanticSettings
    from transferdx.diagnostics.semantic import BandCuts

    d = cfg.diagnostics
    return SemanticSettings(
        tau=float(d.tau),
        cuts=BandCuts(hard=float(d.bands.hard), medium=float(d.bands.medium)),
        background_size=int(d.background_size),
        in_batch=bool(d.in_batch),
        batch_size=int(d.batch_size),
        composite=composite_settings(d.composite),
        chunk_negatives=int(d.get("chunk_negatives", SemanticSettings.chunk_negatives)),
        suspicion=suspicion_settings(d.get("suspicion") or {}),
    )


def composite_settings(node: Any) -> CompositeSettings:
    """``diagnostics.composite``: ε and the exponents (floats), ``resamples`` (null: the audit's
    bootstrap.resamples; 0: no CI), ``max_negatives`` (with resamples null, larger sources get no
    CI; null: no limit); unknown keys are an error."""
    from transferdx.diagnostics.composite import CompositeSettings

    values = dict(plain_config(node)) if OmegaConf.is_config(node) else dict(node)
    valid = {"eps", "exp_rho", "exp_eta", "exp_psi", "zero_tol", "chunk", "resamples", "max_negatives"}
    unknown = sorted(set(values) - valid)
    if unknown:
        raise ValueError(f"unknown diagnostics.composite settings {unknown}; valid: {sorted(valid)}")
    fields: dict[str, Any] = {
        k: float(v) for k, v in values.items() if k not in ("chunk", "resamples", "max_negatives")
    }
    if "chunk" in values:
        fields["chunk"] = int(values["chunk"])
    if values.get("resamples") is not None:
        fields["resamples"] = int(values["resamples"])
    if "max_negatives" in values:
        fields["max_negatives"] = None if values["max_negatives"] is None else int(values["max_negatives"])
    return CompositeSettings(**fields)


def suspicion_settings(node: Any) -> SuspicionSettings:
    """``diagnostics.suspicion``: α, δ (floats) and the score rule (a name); unknown keys are an error."""
    from transferdx.diagnostics.suspicion import SuspicionSettings

    values = dict(plain_config(node)) if OmegaConf.is_config(node) else dict(node)
    unknown = sorted(set(values) - {"alpha", "delta", "rule"})
    if unknown:
        raise ValueError(f"unknown diagnostics.suspicion settings {unknown}; valid: alpha, delta, rule")
    defaults = SuspicionSettings()
    return SuspicionSettings(
        alpha=float(values.get("alpha", defaults.alpha)),
        delta=float(values.get("delta", defaults.delta)),
        rule=str(values.get("rule", defaults.rule)),
    )


def audit_options(cfg: DictConfig) -> AuditOptions:
    """Tokenizer, IDF corpus, frozen-encoder settings, flags, bootstrap, kinds, sample fraction."""
    from transferdx.auditing.pooling import FlagSettings
    from transferdx.inputs.registry import read_corpus
    from transferdx.pipeline.settings import AuditOptions

    idf_texts, idf_label = None, None
    if cfg.idf.name == "external":
        fmt = cfg.idf.get("format", "beir")
        idf_texts = read_corpus(fmt, str(cfg.idf.path))
        idf_label = f"{fmt}:{Path(str(cfg.idf.path)).name}"
    return AuditOptions(
        tokenizer=str(cfg.tokenizer.name),
        tokenizer_options=tokenizer_options(cfg),
        idf=str(cfg.idf.name),
        idf_texts=idf_texts,
        idf_label=idf_label,
        semantic=semantic_settings(cfg) if cfg.diagnostics.semantic else None,
        flags=FlagSettings(cfg.flags.mode, dict(cfg.flags.fixed)),
        resamples=int(cfg.bootstrap.resamples),
        confidence=float(cfg.bootstrap.confidence),
        kinds=dict(cfg.get("kinds") or {}),
        sample_fraction=float(cfg.get("sample_fraction", 1.0)),
        seed=int(cfg.seed),
        on_error=str(cfg.on_error),
        label=input_path(cfg) or str(cfg.data.name),
        command=read_with(cfg),
    )


def clean_call(cfg: DictConfig) -> dict[str, Any]:
    """Arguments of :func:`transferdx.clean` for ``transferdx-clean``: ``records``, the ``input``
    path (so the copy keeps its format), or None for the records ``data`` names
    (:func:`input_settings`, loaded by the caller); ``clean.action``, ``clean.reasons``; no encoder
    when every reason asked for is a text reason."""
    from transferdx.diagnostics.suspicion import TEXT_REASONS

    reasons = [str(r) for r in cfg.clean.reasons] if cfg.clean.get("reasons") is not None else None
    options = audit_options(cfg)
    if reasons is not None and set(reasons) <= set(TEXT_REASONS):
        options = dataclasses.replace(options, semantic=None)
    encoder = check_encoder(backbone_spec(cfg)) if options.semantic is not None else None
    return {
        "records": input_path(cfg),
        "reasons": reasons,
        "action": str(cfg.clean.action),
        "min_probability": _min_probability(cfg.clean.get("min_probability")),
        "fill": str(cfg.clean.get("fill", "repeat")),
        "keep": None if cfg.clean.get("keep") is None else int(cfg.clean.keep),
        "out": Path(cfg.output_dir),
        "options": options,
        "encoder": encoder,
        "cache_dir": str(cfg.paths.cache_dir),
    }


def train_settings(cfg: DictConfig) -> TrainSettings:
    from transferdx.training import TrainSettings

    return TrainSettings.from_config(plain_config(cfg.training))


def benchmark_settings(cfg: DictConfig) -> BenchmarkSettings:
    from transferdx.pipeline.settings import BenchmarkSettings

    return BenchmarkSettings.from_dict(plain_config(cfg.benchmark))


def analysis_settings(cfg: DictConfig) -> AnalysisSettings:
    from transferdx.pipeline.settings import AnalysisSettings

    return AnalysisSettings.from_dict(plain_config(cfg))


def _min_probability(value: Any) -> float | str | None:
    """``clean.min_probability``: ``auto`` (the calibrated threshold with the default reasons), null, or a number."""
    return None if value is None else ("auto" if str(value) == "auto" else float(value))


def train_call(cfg: DictConfig) -> dict[str, Any]:
    """Keyword arguments of :func:`transferdx.train` for ``transferdx-train`` and the study."""
    return {
        "encoder": check_encoder(backbone_spec(cfg)),
        "source": str(cfg.source),
        "settings": train_settings(cfg),
        "seed": int(cfg.seed),
        "artifact_dir": str(cfg.paths.artifact_dir),
        "cache_dir": str(cfg.paths.cache_dir),
    }


def study_call(cfg: DictConfig) -> dict[str, Any]:
    """Keyword arguments of :func:`transferdx.study`. ``sensitivity_dirs`` is read at the top level,
    as in ``transferdx-tables`` (``analysis.sensitivity_dirs`` is still accepted)."""
    return {
        "sources": list(cfg.sources),
        "out": Path(cfg.output_dir),
        "encoder": check_encoder(backbone_spec(cfg)),
        "options": audit_options(cfg),
        "training": train_settings(cfg),
        "benchmark": benchmark_settings(cfg),
        "analysis": analysis_settings(cfg.analysis),
        "sensitivity_dirs": list(cfg.get("sensitivity_dirs") or cfg.analysis.get("sensitivity_dirs") or []),
        "evaluate_frozen": bool(cfg.get("evaluate_frozen")),
        "seeds": plain_config(cfg.get("seeds")),
        "train_controls": bool(cfg.get("train_controls")),
        "audit_encoder": check_encoder(audit_spec(cfg)) if cfg.get("audit_backbone") else None,
        "tables": bool(cfg.get("tables_after")),
        "artifact_dir": str(cfg.paths.artifact_dir),
        "cache_dir": str(cfg.paths.cache_dir),
    }


def prepared_audit(cfg: DictConfig, options: AuditOptions, out: Path) -> PreparedAudit:
    """The audit's input under ``cfg``, prepared (:func:`~transferdx.pipeline.auditing.prepare_audit`):
    loaded, sampled, with its controls; an input with nothing to audit is an error, its exclusions
    written to ``out`` first."""
    from transferdx import pipeline as p
    from transferdx.inputs.registry import as_cleaned_copy, cleaned_copy_facts

    loaded = p.load_inputs(input_settings(cfg), encoder := build_encoder(cfg))
    # a transferdx-clean copy, audited again: given as input=, or as a data preset's path (an id table
    # is read with its lookups: data=idlist data.path=<out>/cleaned/<file> data.corpus=… data.queries=…)
    if (cleaned := cleaned_copy_facts(input_path(cfg) or cfg.data.get("path"))) is not None:
        loaded = as_cleaned_copy(loaded, cleaned)
    p.require_records(loaded, options.label, out)
    kept = encoder if options.semantic else None
    return p.prepare_audit(loaded, options, encoder=kept, controls=self_controls(cfg))
