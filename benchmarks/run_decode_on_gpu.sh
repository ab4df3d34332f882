#!/usr/bin/env bash
# The LLM decode kernels (issue 20) on an H100/H200, one call: the kernels through Triton's
# JIT (benchmarks/decode_jit_check.py: checks at Llama/Mixtral sizes, then its sweep against
# SDPA flash and a per-expert loop), recipes/decode.toml built and tuned on this GPU, then
# tests/gpu/test_decode_gpu.py on that bundle. Logs and the build's report come back in
# $OUT/decode.tar.gz; a summary is printed last.
#   device: carry [".whl"], command: bash benchmarks/run_decode_on_gpu.sh
W=${W:-/tmp/aotc-decode}
source benchmarks/gpu_run.sh
pack() { (cd "$W" && tar czf "$OUT/decode.tar.gz" logs decode.report.md decode.tunedb.jsonl 2>/dev/null); }
trap 'pack; cat "$S"' EXIT
STAGES=${STAGES:-"jit build tests"}
[[ " $STAGES " == *" jit "* ]] && stage jit "${JIT_LIMIT:-200}" python3 benchmarks/decode_jit_check.py ${JIT_ARGS:-}
[[ " $STAGES " == *" build "* ]] && \
  stage build "${BUILD_LIMIT:-240}" python3 -m aot.cli build recipes/decode.toml -o "$W/decode.aotc" -j 16
pack
if [[ -f "$W/decode.aotc" ]]; then export AOTC_TEST_DECODE_BUNDLE=$W/decode.aotc; fi
[[ " $STAGES " == *" tests "* ]] && \
  stage tests "${TEST_LIMIT:-120}" python3 -m pytest -q -m gpu tests/gpu/test_decode_gpu.py -p no:cacheprovider -rf
grep -E "^(FAILED|ERROR)" "$W/logs/tests.log" 2>/dev/null | head -8 >> "$S"
grep -vE "^\[" "$W/logs/jit.log" 2>/dev/null | tail -40 >> "$S"
