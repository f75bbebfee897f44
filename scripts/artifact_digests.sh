#!/usr/bin/env bash
# sha256 of every artifact a fixed set of runs writes: a structural change must leave them identical.
#   bash scripts/artifact_digests.sh OUT_DIR > digests.txt    # before; again after; diff the two
# Runs (offline, from the warm embedding cache where there is one): the demo audit; a
# sentence-transformers n-tuple Parquet file (built from TREC-DL19's judged pairs) audited and cleaned;
# the TREC-DL19 audit; the frozen MiniLM evaluated on SciFact test; the synthetic study's tables.
# Needs TRANSFERDX_DATA_DIR (default ../shared/data) and the .venv that `make setup` builds.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: artifact_digests.sh OUT_DIR}"
BIN="${BIN:-.venv/bin}"
export TRANSFERDX_DATA_DIR="${TRANSFERDX_DATA_DIR:-$(cd .. && pwd)/shared/data}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
rm -rf "$OUT" && mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

"$BIN/transferdx-audit" output_dir="$OUT/demo" > "$OUT/demo.stdout"

"$BIN/python" - "$OUT/st" "$TRANSFERDX_DATA_DIR" <<'PY'
import sys
from pathlib import Path

import pandas as pd

import transferdx as tdx

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
records = tdx.load(Path(sys.argv[2]) / "msmarco-dl19", format="trec_dl").records
rows = []
for record in records:
    negatives = [n.text for n in record.negatives][:5]
    if len(negatives) == 5:
        rows.append(
            {"anchor": record.query, "positive": record.positives[0].text}
            | {f"negative_{i}": text for i, text in enumerate(negatives, 1)}
        )
pd.DataFrame(rows[:300]).to_parquet(out / "mined.parquet", index=False)
PY
"$BIN/transferdx-audit" input="$OUT/st/mined.parquet" output_dir="$OUT/st/audit" > "$OUT/st-audit.stdout"
"$BIN/transferdx-clean" input="$OUT/st/mined.parquet" output_dir="$OUT/st/clean" > "$OUT/st-clean.stdout"

"$BIN/transferdx-audit" data=msmarco_dl19 output_dir="$OUT/dl19" > "$OUT/dl19.stdout"
"$BIN/transferdx-evaluate" output_dir="$OUT/scifact-eval" > "$OUT/scifact-eval.stdout"

"$BIN/python" - "$OUT/synthetic" <<'PY'
import sys
from pathlib import Path

sys.path.insert(0, ".")
from tests.synthetic import write_all

write_all(Path(sys.argv[1]))
PY
"$BIN/transferdx-tables" "study_dirs=[$OUT/synthetic/study/distilbert,$OUT/synthetic/study/e5_base]" \
  "sensitivity_dirs=[$OUT/synthetic/sensitivity]" output_dir="$OUT/tables" > "$OUT/tables.stdout"

cd "$OUT" && find . -type f ! -name '*.stdout' -print0 | sort -z | xargs -0 sha256sum
