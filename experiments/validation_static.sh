#!/usr/bin/env bash
# The static-backbone known-truth validation (issue 21; make validation-static): transferdx-study
# +experiment=validation_static trains the static MiniLM-token-embedding model on SciFact train with every
# genuine source, every control and the random-mix ladder, 5 seeds each, on every audited negative;
# evaluates on SciFact test and TREC-DL19; checks convergence (step 100 against step 125, seed 0 of every
# source); then copies the small results into the repository. About 90 min on 2 shared CPU cores from an
# empty cache; a re-run reads every model and embedding from cache and rewrites the same bytes.
# Usage: bash experiments/validation_static.sh [OUT [RESULTS]]   (BIN: console scripts, default .venv/bin)
set -euo pipefail
OUT=${1:-outputs/validation-static}
RESULTS=${2:-experiments/results/validation/static}
BIN=${BIN:-.venv/bin}
"$BIN/transferdx-study" +experiment=validation_static "output_dir=$OUT" ${VALIDATION_ARGS:-}
"$BIN/python" experiments/convergence.py "$OUT" --seed 0
"$BIN/python" experiments/export_validation.py "$OUT" "$RESULTS" --command "make validation-static"
echo "validation (static): $OUT (results: $RESULTS/README.md)"
