"""The input layer (the ground floor: it imports nothing of transferdx above it).

:mod:`~transferdx.inputs.records` holds the data model; :mod:`~transferdx.inputs.reading` the
reading machinery (located problems, the error policy, lines, JSON, lookup tables, sidecars);
:mod:`~transferdx.inputs.tables` reads a table in any form and :mod:`~transferdx.inputs.rows` turns
shaped rows into records; :mod:`~transferdx.inputs.texts` keeps one object per distinct text. Each
format family has one module, imported here so that it registers its formats in
:mod:`~transferdx.inputs.registry`. Detectors are tried in registration order; no table of one
family's columns matches another family's detector, and within a family (the sentence-transformers
shapes) the module registers the more specific shape first.
"""

from transferdx.inputs import (  # noqa: F401  (importing a family registers its formats)
    beir,
    flagembedding,
    idlists,
    msmarco,
    sentence_transformers,
    tevatron,
    transferdx_records,
    trec_dl,
)
