"""The edges of a command-line run: the one-line message for an error the user can fix
(:func:`user_error`), a missing input file said before any work (:func:`require_input`), the exit
with status 2 (:func:`fail`), third-party libraries kept quiet (:func:`quiet_libraries`,
:class:`ConsoleFilter`), and the Hydra callback that keeps an explicit ``output_dir`` free of
Hydra's log file (:class:`RunFolderCallback`)."""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

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
    if isinstance(exc, (HydraException, FolderInUseError, ValueError)):
        return _one_line(str(exc).split("\nConfig search path:")[0]) or type(exc).__name__
    if isinstance(exc, OSError):
        return _one_line(str(exc)) or type(exc).__name__
    return None


def require_input(cfg: DictConfig) -> None:
    """``input=`` naming a file or folder that does not exist: the reader's own one-line error
    (:func:`transferdx.inputs.registry.load_path`), raised before the verb imports the pipeline
    (pandas, torch…), so that it comes in a second. A bare word may name a registered input
    (``input=demo``): the reader decides those."""
    path = c.input_path(cfg)
    if path and not path.isidentifier() and not Path(path).exists():
        raise ValueError(f"{Path(path)}: field '<path>': no such file or folder")


def fail(message: str) -> None:
    """Remove the output folders this run made and left empty, print one line, exit 2."""
    for folder in sorted(c.NEW_OUTPUT_DIRS, reverse=True):  # made for this run, still empty: remove
        try:
            folder.rmdir()
        except OSError:
            pass
    print(f"transferdx: error: {message}", file=sys.stderr)
    sys.exit(2)


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
