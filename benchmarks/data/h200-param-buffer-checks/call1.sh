#!/usr/bin/env bash
# call 1 (2026-12-03, fifth session): the matmul probe, decode + gallery + shipped GPU tests
# with the whole-buffer launch, lightllm's GQA decode held out.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD AOTC_NO_PROGRESS=1
start=$SECONDS
timeout 200 python3 benchmarks/probe_matmul_large.py --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1
echo "probe: exit $? in $((SECONDS-start)) s"
start=$SECONDS
BUNDLE=.gpu/dec/decode.aotc STAGES=tests TEST_LIMIT=120 bash benchmarks/run_decode_on_gpu.sh > "$OUT/decode.txt" 2>&1
echo "decode tests: $((SECONDS-start)) s: $(grep '^tests' /tmp/aotc-decode/logs/summary.txt)"
start=$SECONDS
STAGES="build tests" SEED=.gpu/tb TEST_TIMEOUT=150 bash benchmarks/run_gallery_on_gpu.sh > "$OUT/gallery.txt" 2>&1
echo "gallery: $((SECONDS-start)) s"; grep -E "tests|FAILED|ERROR" "$OUT/gallery.txt" | head -12
start=$SECONDS
RECIPES=decode BUILD_LIMIT=150 bash benchmarks/heldout/lightllm/run.sh > "$OUT/lightllm.txt" 2>&1
echo "lightllm decode: $((SECONDS-start)) s"; tail -25 "$OUT/lightllm.txt"
echo; grep -vE "^\[" "$OUT/probe.log" | tail -70
