#!/usr/bin/env bash
# Issue 19, on an H100/H200, one call: two training kernels whose held-out misses no other
# committed database had timed, tuned again from nothing into fresh databases, every config
# at every bucket as their recipes say: paged_decode_reduce (recipes/decode.toml, alone:
# --tune-only, the other kernels the heuristic's picks, untimed) and bmm_bias
# (benchmarks/training/bmm.toml, grid, no early stop). benchmarks/costmodel_remeasured.py
# reads them once they are in benchmarks/data/h200-remeasured/ (never trained on).
# Databases, reports and logs come back in $OUT/remeasure.tar.gz.
#   device: carry [".whl"], command: bash benchmarks/run_remeasure_on_gpu.sh
W=${W:-/tmp/aotc-remeasure}
source benchmarks/gpu_run.sh
pack() {
  (cd "$W" && gzip -9nkf ./*.tunedb.jsonl 2>/dev/null
   tar czf "$OUT/remeasure.tar.gz" logs ./*.tunedb.jsonl.gz ./*.report.md 2>/dev/null)
}
trap 'pack; cat "$S"' EXIT
stage reduce "${REDUCE_LIMIT:-220}" python3 -m aot.cli build recipes/decode.toml -o "$W/decode.aotc" \
  -j 16 --tune-only paged_decode_reduce --predict heuristic --db "$W/decode.tunedb.jsonl"
stage bmm "${BMM_LIMIT:-150}" python3 -m aot.cli build benchmarks/training/bmm.toml -o "$W/bmm.aotc" \
  -j 16 --db "$W/bmm.tunedb.jsonl"
