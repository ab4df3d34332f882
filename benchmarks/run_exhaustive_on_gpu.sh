#!/usr/bin/env bash
# One call on a GPU machine: tune the example's space exhaustively (the ground truth for
# benchmarks/sample_efficiency.py), then @triton.autotune over the same space vs aotc vs
# cuBLAS. Logs and the tuning database under $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 AOTC_CACHE_DIR=/tmp/aotc-cache
mkdir -p /tmp/ex
start=$(date +%s)
timeout ${TUNE_LIMIT:-400} python3 -m aot.cli build benchmarks/recipes/exhaustive.toml -o /tmp/ex/exhaustive.aotc 2>&1 | tee "$OUT/exhaustive.log" | grep -v "^tune\|^compile" | tail -6
echo "exhaustive tune wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/exhaustive.log"
gzip -c /tmp/ex/exhaustive.tunedb.jsonl > "$OUT/exhaustive.tunedb.jsonl.gz"
cp /tmp/ex/exhaustive.report.md "$OUT/"
timeout 400 python3 benchmarks/autotune_compare.py --bundle /tmp/ex/exhaustive.aotc --json "$OUT/autotune.json" 2>&1 | tee "$OUT/autotune.log" | tail -8
