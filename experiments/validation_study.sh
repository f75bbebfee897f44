#!/usr/bin/env bash
# Known-truth validation end to end on a CPU, offline (make validation-study): transferdx-study
# +experiment=validation trains MiniLM on SciFact train with the genuine sources and with controls
# whose defect is known, several seeds each, evaluates every model and the frozen one on the full
# SciFact test split, and ends with the validation tables; then the small results are copied into
# the repository. About 90 min on 2 CPU cores the first time; a re-run reads every model and
# embedding from cache (minutes) and rewrites the same bytes.
# Usage: bash experiments/validation_study.sh [OUT [RESULTS]]   (BIN: console scripts, default .venv/bin)
set -euo pipefail
OUT=${1:-outputs/validation-study}
RESULTS=${2:-experiments/results/validation/minilm_negatives1}
BIN=${BIN:-.venv/bin}
"$BIN/transferdx-study" +experiment=validation "output_dir=$OUT" ${VALIDATION_ARGS:-}
"$BIN/python" experiments/export_validation.py "$OUT" "$RESULTS" --command "make validation-study"
echo "validation study: $OUT (results: $RESULTS/README.md)"
