#!/usr/bin/env bash
# The LLM decode kernels (issue 20) on an H100/H200, one call: the kernels through Triton's
# JIT (benchmarks/decode_jit_check.py: checks at Llama/Mixtral sizes, then its sweep against
# SDPA flash and a per-expert loop), recipes/decode.toml built and tuned on this GPU, then
# tests/gpu/test_decode_gpu.py on that bundle (the decode_step pipeline included), then
# (stage "step") benchmarks/decode_step_bench.py: the whole step per token bucket against
# eager PyTorch and torch.compile, and its time to ready; (stage "verify") the same for
# speculative decoding's verification, 4 tokens per sequence; (stage "kernels")
# benchmarks/decode_kernels_bench.py: paged decode against SDPA flash, the MoE layer against
# a per-expert loop and its torch.compile max-autotune; (stage "ready") time to ready,
# aotc's against torch.compile's with cold and with warm caches. Logs, the build's report and the
# benchmark's JSON come back in $OUT/decode.tar.gz; a summary is printed last.
#   device: carry [".whl"], command: bash benchmarks/run_decode_on_gpu.sh
#   a bundle built earlier: BUNDLE=<path> STAGES="tests step" (carry its folder too)
#   speculative decoding's verification: the "verify" stage (decode_step_bench.py --verify 4)
#   an earlier tuning database to extend (its measurements of unchanged kernels are kept):
#   SEED_DB="<path>.tunedb.jsonl[.gz] ...", e.g. "benchmarks/data/h200-decode-step/decode.tunedb.jsonl.gz
#   benchmarks/data/h200-decode-step/wide-space.tunedb.jsonl.gz" (concatenated in order)
#   more build options, e.g. BUILD_ARGS="--tune-only paged_decode_split" (the others' records
#   taken from SEED_DB as they are)
W=${W:-/tmp/aotc-decode}
source benchmarks/gpu_run.sh
pack() { (cd "$W" && tar czf "$OUT/decode.tar.gz" logs decode.report.md decode.report decode.tunedb.jsonl step.json verify.json kernels.json ready.json 2>/dev/null); }
trap 'pack; cat "$S"' EXIT
STAGES=${STAGES:-"jit build tests"}
if [[ -n "${SEED_DB:-}" && ! -f "$W/decode.tunedb.jsonl" ]]; then  # plain or gzipped, one or more
  # shellcheck disable=SC2086  # several files, space-separated, concatenated in order
  gunzip -cf $SEED_DB > "$W/decode.tunedb.jsonl"
fi
[[ " $STAGES " == *" jit "* ]] && stage jit "${JIT_LIMIT:-200}" python3 benchmarks/decode_jit_check.py ${JIT_ARGS:-}
[[ " $STAGES " == *" build "* ]] && \
  stage build "${BUILD_LIMIT:-420}" python3 -m aot.cli build recipes/decode.toml -o "$W/decode.aotc" -j 16 ${BUILD_ARGS:-}
pack
BUNDLE=${BUNDLE:-$W/decode.aotc}
if [[ -f "$BUNDLE" ]]; then export AOTC_TEST_DECODE_BUNDLE=$BUNDLE; fi
[[ " $STAGES " == *" tests "* ]] && \
  stage tests "${TEST_LIMIT:-150}" python3 -m pytest -q -m gpu tests/gpu/test_decode_gpu.py -p no:cacheprovider -rf
[[ " $STAGES " == *" kernels "* ]] && \
  stage kernels "${KERNELS_LIMIT:-240}" python3 benchmarks/decode_kernels_bench.py --bundle "$BUNDLE" --json "$W/kernels.json"
[[ " $STAGES " == *" verify "* ]] && \
  stage verify "${VERIFY_LIMIT:-150}" python3 benchmarks/decode_step_bench.py --bundle "$BUNDLE" --json "$W/verify.json" \
    --verify 4 --sizes 4,8,16,32,64,128,256,512 --compile-sizes 4,16,128 --ready-runs 0
[[ " $STAGES " == *" ready "* ]] && \
  stage ready "${READY_LIMIT:-300}" python3 benchmarks/decode_step_bench.py --bundle "$BUNDLE" --json "$W/ready.json" \
    --no-latency --ready-runs 3 ${READY_ARGS:---compile-ready 1,2,4,8,16,32,64,128,256,512}
[[ " $STAGES " == *" step "* ]] && \
  stage step "${STEP_LIMIT:-300}" python3 benchmarks/decode_step_bench.py --bundle "$BUNDLE" --json "$W/step.json" ${STEP_ARGS:-}
pack
grep -A40 "^Decode step latency" "$W/logs/step.log" "$W/logs/verify.log" 2>/dev/null >> "$S"
grep -A40 "^Paged decode attention" "$W/logs/kernels.log" 2>/dev/null >> "$S"
grep -E "^(torch.compile|Time to ready)" "$W/logs/ready.log" 2>/dev/null >> "$S"
grep -E "^(FAILED|ERROR)" "$W/logs/tests.log" 2>/dev/null | head -8 >> "$S"
grep -vE "^\[" "$W/logs/jit.log" 2>/dev/null | tail -40 >> "$S"
