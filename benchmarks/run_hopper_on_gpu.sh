#!/usr/bin/env bash
# Hopper kernels (issue 21) on an H100/H200, one call: the kernels through Triton's JIT
# (a sanity check independent of aotc), recipes/hopper.toml built and tuned on this GPU,
# tests/gpu/test_hopper_gpu.py on that bundle, then benchmarks/hopper_bench.py. Logs, the
# build's report and tuning database and the benchmark's JSON come back in
# $OUT/hopper.tar.gz; a summary is printed last.
#   device: carry [".whl"], command: bash benchmarks/run_hopper_on_gpu.sh
#   an earlier tuning database to extend (its measurements of unchanged kernels are kept):
#   SEED_DB=benchmarks/data/h200-hopper/hopper.tunedb.jsonl.gz
#   more build options, e.g. BUILD_ARGS="--tune-only attention_d64" (the others' records
#   taken from SEED_DB as they are)
W=${W:-/tmp/aotc-hopper}
source benchmarks/gpu_run.sh
pack() { (cd "$W" && tar czf "$OUT/hopper.tar.gz" logs hopper.report.md hopper.report hopper.tunedb.jsonl 2>/dev/null); }
trap 'pack; cat "$S"' EXIT
if [[ -n "${SEED_DB:-}" && ! -f "$W/hopper.tunedb.jsonl" ]]; then  # plain or gzipped
  # shellcheck disable=SC2086  # several files, space-separated, concatenated in order
  gunzip -cf $SEED_DB > "$W/hopper.tunedb.jsonl"
fi
[[ " ${STAGES:-jit build tests bench} " == *" jit "* ]] && \
  stage jit "${JIT_LIMIT:-45}" python3 benchmarks/hopper_jit_check.py --quick
[[ " ${STAGES:-jit build tests bench} " == *" build "* ]] && \
  stage build "${BUILD_LIMIT:-300}" python3 -m aot.cli build recipes/hopper.toml -o "$W/hopper.aotc" -j 16 ${BUILD_ARGS:-}
pack
if [[ -f "$W/hopper.aotc" ]]; then export AOTC_TEST_HOPPER_BUNDLE=$W/hopper.aotc; fi
[[ " ${STAGES:-jit build tests bench} " == *" tests "* ]] && \
  stage tests "${TEST_LIMIT:-100}" python3 -m pytest -q -m gpu tests/gpu/test_hopper_gpu.py -p no:cacheprovider -rf -x
grep -E "^(FAILED|ERROR)|Error" "$W/logs/tests.log" 2>/dev/null | head -8 >> "$S"
pack
if [[ -f "$W/hopper.aotc" && " ${STAGES:-jit build tests bench} " == *" bench "* ]]; then
  stage bench "${BENCH_LIMIT:-120}" python3 benchmarks/hopper_bench.py --bundle "$W/hopper.aotc" \
    --json "$W/logs/bench.json" --lengths "${LENGTHS:-512,1024,4096,16384}" --only "${BENCH_ONLY:-matmul,attention,host}"
  grep -vE "^\[hopper_bench\]" "$W/logs/bench.log" | tail -45 >> "$S"
fi
