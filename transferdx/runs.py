"""The edges of a command-line run: the one-line message for an error the user can fix
(:func:`user_error`), a missing input file said before any work (:func:`require_input`), the exit
with status 2 (:func:`fail`), third-party libraries kept quiet (:func:`quiet_libraries`,
:class:`ConsoleFilter`), and the Hydra callback that keeps an explicit ``output_dir`` free of
Hydra's log file (:class:`RunFolderCallback`)."""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from yaml import YAMLError

from transferdx import config as c
from transferdx.artifacts import FolderInUseError

# ---------------------------------------------------------------------------------------------
# Errors: one line on stderr, exit status 2
# ---------------------------------------------------------------------------------------------

QUOTING = (
    "quote a value holding a comma, a non-ASCII character or another of Hydra's special characters,"
    " the outer quotes for the shell and the inner ones for Hydra: {example}"
)


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _quoted(override: str) -> str:
    """``override`` as it should be typed in bash: ``'key="value"'``."""
    key, _, value = override.partition("=")
    if "'" in value:
        return f"\"{key}='{value}'\"" if '"' not in value else override
    return f"'{key}=\"{value}\"'"


def user_error(exc: BaseException) -> str | None:
    """The one-line message for an error the user can fix (bad input, setting or command line); None
    for anything else (a bug, whose traceback is wanted)."""
    from hydra.errors import ConfigCompositionException, HydraException, OverrideParseException
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    if isinstance(exc, OverrideParseException):
        return f"cannot parse {exc.override!r}: {QUOTING.format(example=_quoted(exc.override))}"
    found = re.search(r"Ambiguous value for argument '(.*)'", str(exc))
    if isinstance(exc, ConfigCompositionException) and found:
        override, hint = found.group(1), QUOTING.format(example=_quoted(found.group(1)))
        return f"{override!r} holds a comma, which Hydra reads as values to sweep over (with -m); {hint}"
    if isinstance(exc, OmegaConfBaseException):
        if isinstance(exc, MissingMandatoryValue) and getattr(exc, "full_key", None):
            return f"missing value: set {exc.full_key}=... on the command line"
        key, text = getattr(exc, "full_key", None), str(exc).split("\n    full_key:")[0]
        if found := re.match(r"\w+ raised while resolving interpolation: ", text):
            return _one_line(text[found.end() :])  # a resolver's own error, c.OutputDirError
        return _one_line(text) + (f" ({key})" if key else "")
    if (yaml_error := _in_chain(exc, YAMLError)) is not None:
        return yaml_line(yaml_error)
    os_error = _in_chain(exc, OSError)
    if os_error is not None and os_error is not exc:
        if "Unable to configure handler" in str(exc):  # Hydra could not open the job's log file
            return os_error_line(os_error, writing="log")
        if os_error.errno in WRITE_CAUSES:
            return os_error_line(os_error)
    if isinstance(exc, (HydraException, FolderInUseError, ValueError)):
        return _one_line(str(exc).split("\nConfig search path:")[0]) or type(exc).__name__
    if isinstance(exc, OSError):
        return os_error_line(exc)
    return None


def _in_chain(exc: BaseException, kind: type[BaseException] | tuple[type[BaseException], ...]) -> Any:
    """The first exception of ``kind`` in ``exc``'s chain of causes and contexts (``exc`` first), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return None


# errno → what it means for a run that writes (read-only folder, full disk …)
WRITE_CAUSES = {
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


FULL_DISK_ADVICE = "free some space, or point output_dir=, TRANSFERDX_CACHE_DIR or TRANSFERDX_MODEL_DIR at another disk"


def os_error_line(exc: OSError, writing: str | None = None) -> str:
    """One line naming the file or folder and the cause: "cannot write /out/profile.csv: no space left
    on the device; free some space, or give output_dir= … on another disk"."""
    cause = WRITE_CAUSES.get(exc.errno or -1) or (exc.strerror.lower() if writing and exc.strerror else None)
    path = exc.filename
    if cause is None:
        return _one_line(str(exc)) or type(exc).__name__
    what = "the run's log file " if writing == "log" else ""
    target = f" {what}{path}" if path else (f" {what.strip()}" if what else "")
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    advice = FULL_DISK_ADVICE if full else "give output_dir= and hydra.run.dir= a folder this user can write"
    return f"cannot write{target}: {cause}; {advice}"


def yaml_line(exc: Any) -> str:
    """A YAML file that is not plain data, in one line: where, and why (a ``!!python`` tag is refused:
    configs are read with the safe loader)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{mark.name}: line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "a YAML file"
    problem = _one_line(str(getattr(exc, "problem", None) or exc).split("\n  in ")[0])
    tag = re.search(r"tag '(?:tag:yaml.org,2002:)?([^']+)'", problem)
    if tag:
        refused = "configs are read as plain data, never as Python objects"
        return f"{where}: the YAML tag !!{tag.group(1)} is refused ({refused})"
    return f"{where}: not valid YAML: {problem}"


def require_input(cfg: DictConfig) -> None:
    """``input=`` naming a file or folder that does not exist: the reader's own one-line error
    (:func:`transferdx.inputs.registry.load_path`), raised before the verb imports the pipeline
    (pandas, torch…), so that it comes in a second. A bare word may name a registered input
    (``input=demo``), and ``hf:…`` a Hub dataset: the reader decides those."""
    path = c.input_path(cfg)
    if path and not path.isidentifier() and not path.startswith("hf:") and not Path(path).exists():
        raise ValueError(f"{Path(path)}: field '<path>': no such file or folder")


def _remove_empty_output_dirs() -> None:
    for folder in sorted(c.NEW_OUTPUT_DIRS, reverse=True):  # made for this run, still empty: remove
        try:
            folder.rmdir()
        except OSError:
            pass


def fail(message: str) -> None:
    """Remove the output folders this run made and left empty, print one line, exit 2."""
    _remove_empty_output_dirs()
    print(f"transferdx: error: {message}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------
# Signals: Ctrl-C and SIGTERM end a run with one line, its claims released, exit 128 + signal
# ---------------------------------------------------------------------------------------------

SIGNAL_NAMES: dict[int, str] = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}


class Interrupted(BaseException):
    """A SIGINT or SIGTERM, raised where the run was so that every ``finally`` runs (the cache writes
    what it encoded, claim files are removed). A BaseException, like KeyboardInterrupt: no
    ``except Exception`` swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def catch_signals() -> None:
    """SIGINT and SIGTERM raise :class:`Interrupted` (once: a second signal while the run cleans up is
    ignored, so the cleanup finishes; kill -9 still ends it at once, losing nothing verified)."""

    def handler(signum: int, frame: Any) -> None:
        for s in SIGNAL_NAMES:
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    for s in SIGNAL_NAMES:
        signal.signal(s, handler)


def interrupted(exc: BaseException) -> None:
    """One line for an interrupted run and exit 128 + the signal (130 for Ctrl-C, 143 for SIGTERM)."""
    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    _remove_empty_output_dirs()
    cache = sys.modules.get("transferdx.embed.cache")  # not imported: nothing was encoded
    stored = cache.texts_stored() if cache is not None else 0
    kept = (
        f"the embedding cache keeps the {stored:,} texts this run encoded; rerun the same command to resume"
        if stored
        else "rerun the same command to start again (finished trainings and cached texts are reused)"
    )
    print(f"\ntransferdx: interrupted by {SIGNAL_NAMES.get(signum, f'signal {signum}')}; {kept}", file=sys.stderr)
    sys.exit(128 + int(signum))


# ---------------------------------------------------------------------------------------------
# Third-party libraries: their notices are for their own developers, not for someone running a verb
# ---------------------------------------------------------------------------------------------

# Libraries that log to handlers of their own, at the level these variables name (read when the
# library is first imported): a command-line run sets them to ``error`` unless the user set them.
LIBRARY_VERBOSITY = ("TRANSFORMERS_VERBOSITY", "HF_HUB_VERBOSITY", "DATASETS_VERBOSITY")
# Python warnings issued in these packages are not shown on the command line.
QUIET_PACKAGES = ("transformers", "sentence_transformers", "huggingface_hub", "datasets")
# Loggers whose records below ERROR the console shows: transferdx's own, and Hydra's (about the
# command line itself). Every other logger's info and warnings go to the run's ``cli.log`` only (and
# nowhere with an explicit ``output_dir``, which gets no log file).
CONSOLE_LOGGERS = ("transferdx", "hydra", "__main__")


def quiet_libraries() -> None:
    """At the start of a command-line run, before any library is imported: transformers,
    huggingface_hub and datasets log errors only (a user's own ``*_VERBOSITY`` wins), and their Python
    warnings are ignored. The Python API leaves logging to its caller."""
    for name in LIBRARY_VERBOSITY:
        os.environ.setdefault(name, "error")
    packages = "|".join(re.escape(p) for p in QUIET_PACKAGES)
    warnings.filterwarnings("ignore", module=rf"({packages})(\.|$)")
    default = warnings.showwarning

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None):
        """transferdx's own warnings (a damaged cache chunk, an unfinished output folder) in one line."""
        if category.__module__.startswith("transferdx"):
            print(f"transferdx: warning: {message}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show


class ConsoleFilter(logging.Filter):
    """On the console: records of :data:`CONSOLE_LOGGERS` and every error; a library's info and
    warnings (sentence-transformers' "Loading SentenceTransformer model …") are left to ``cli.log``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        return any(record.name == name or record.name.startswith(name + ".") for name in CONSOLE_LOGGERS)


class RunFolderCallback(Callback):
    """A Hydra callback (``hydra.callbacks.run_folder`` in ``conf/*.yaml``), called once Hydra has set
    up the job's logging: the console handlers get a :class:`ConsoleFilter`; with an explicit
    ``output_dir`` the job's log goes to the console only, no ``<job>.log`` file in the folder."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        for handler in logging.getLogger().handlers:
            console = isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
            if console and not any(isinstance(f, ConsoleFilter) for f in handler.filters):
                handler.addFilter(ConsoleFilter())
        if c.explicit_output_dir(config) is None:
            return
        folder = Path(str(config.hydra.runtime.output_dir)).resolve()
        root = logging.getLogger()
        for handler in list(root.handlers):
            if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == folder:
                root.removeHandler(handler)
                handler.close()
                log = Path(handler.baseFilename)
                if log.is_file() and log.stat().st_size == 0:
                    log.unlink()
