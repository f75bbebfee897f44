"""transferdx: audit hard-negative sources for dense-retriever training before training on them."""

from transferdx.inputs.records import Exclusion, InputError, LoadResult, Passage, Record

__version__ = "0.1.0"

__all__ = ["Exclusion", "InputError", "LoadResult", "Passage", "Record", "__version__"]
