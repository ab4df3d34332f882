#!/usr/bin/env bash
# Issue 19, on an H100/H200, one call: kernels whose held-out misses no other committed
# database had timed, tuned again from nothing into fresh databases, every config at every
# bucket: paged_decode_reduce (stage "reduce": recipes/decode.toml as it is, alone:
# --tune-only, the other kernels the heuristic's picks, untimed), bmm_bias ("bmm":
# benchmarks/training/bmm.toml, grid, no early stop), the example recipe's matmul at fp16,
# M = 64 ("matmul": benchmarks/recipes/remeasure_matmul.toml) and the gallery's MoE at 64
# tokens ("moe": benchmarks/recipes/remeasure_moe.toml), both every config, no early stop.
# benchmarks/costmodel_remeasured.py reads them once they are in
# benchmarks/data/h200-remeasured/ (never trained on). Databases, reports and logs come back
# in $OUT/remeasure.tar.gz.
#   device: carry [".whl"], command: bash benchmarks/run_remeasure_on_gpu.sh
#   some stages only: STAGES="matmul moe" bash benchmarks/run_remeasure_on_gpu.sh
W=${W:-/tmp/aotc-remeasure}
source benchmarks/gpu_run.sh
pack() {
  (cd "$W" && gzip -9nkf ./*.tunedb.jsonl 2>/dev/null
   tar czf "$OUT/remeasure.tar.gz" logs ./*.tunedb.jsonl.gz ./*.report.md 2>/dev/null)
}
trap 'pack; cat "$S"' EXIT
STAGES=${STAGES:-"reduce bmm matmul moe"}
[[ " $STAGES " == *" reduce "* ]] && \
  stage reduce "${REDUCE_LIMIT:-220}" python3 -m aot.cli build recipes/decode.toml -o "$W/decode.aotc" \
  -j 16 --tune-only paged_decode_reduce --predict heuristic --db "$W/decode.tunedb.jsonl"
[[ " $STAGES " == *" bmm "* ]] && \
  stage bmm "${BMM_LIMIT:-150}" python3 -m aot.cli build benchmarks/training/bmm.toml -o "$W/bmm.aotc" \
  -j 16 --db "$W/bmm.tunedb.jsonl"
[[ " $STAGES " == *" matmul "* ]] && \
  stage matmul "${MATMUL_LIMIT:-200}" python3 -m aot.cli build benchmarks/recipes/remeasure_matmul.toml \
  -o "$W/matmul.aotc" -j 16 --db "$W/matmul.tunedb.jsonl"
[[ " $STAGES " == *" moe "* ]] && \
  stage moe "${MOE_LIMIT:-240}" python3 -m aot.cli build benchmarks/recipes/remeasure_moe.toml \
  -o "$W/moe.aotc" -j 16 --db "$W/moe.tunedb.jsonl"
