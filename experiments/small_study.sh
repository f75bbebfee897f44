#!/usr/bin/env bash
# The small study end to end on a CPU, offline (make small-study):
#   1. the sources, built once (SciFact train; conf/experiment/small_sources.yaml, controls left out);
#   2. sensitivity audits of those fixed sources, one factor changed per sweep: sample fraction,
#      tokenizer, IDF corpus, temperature, and (ENCODERS=mpnet_base, slow on CPU) the encoder,
#      with ENCODER_ARGS for that audit (e.g. "sample_fraction=0.25 backbone.max_seq_length=128");
#   3. transferdx-study: sources → audit → train → evaluate → agree → match → tables, the tables
#      reading the sensitivity audits for Tables 8–9 and the sensitivity table.
# Usage: bash experiments/small_study.sh [OUT]   (BIN: folder of the console scripts, default .venv/bin)
set -euo pipefail
OUT=${1:-outputs/small-study}
BIN=${BIN:-.venv/bin}
S="$OUT/sensitivity"
"$BIN/transferdx-build" +experiment=small_sources 'controls=[]' "output_dir=$S/sources" "hydra.run.dir=$S/sources"
audit() { "$BIN/transferdx-audit" -m "input=$S/sources" "$@"; }
audit sample_fraction=0.25,0.5,0.75,1.0 "hydra.sweep.dir=$S/sample_fraction"
audit tokenizer=whitespace,backbone "hydra.sweep.dir=$S/tokenizer"
audit idf=per_source,external "hydra.sweep.dir=$S/idf"
audit diagnostics.tau=0.02,0.1 "hydra.sweep.dir=$S/tau"
if [ -n "${ENCODERS:-}" ]; then
  # shellcheck disable=SC2086  # ENCODER_ARGS is a list of overrides
  audit "backbone=$ENCODERS" ${ENCODER_ARGS:-} "hydra.sweep.dir=$S/encoder"
fi
"$BIN/transferdx-study" +experiment=small_study "hydra.run.dir=$OUT" \
  "sensitivity_dirs=[$S/sample_fraction,$S/tokenizer,$S/idf,$S/tau${ENCODERS:+,$S/encoder}]" \
  analysis.in_family=minilm_l6
echo "small study: $OUT (tables: $OUT/tables/tables.md)"
