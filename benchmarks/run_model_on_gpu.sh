#!/usr/bin/env bash
# Model mode (recipes/layer.toml) on a GPU machine, in stages (default: all; e.g.
# STAGES="tests bench"). Logs and results under $OUT:
#   tests    tests/gpu/test_model_gpu.py (tiny model built here; the layer bundle if built)
#   build    aotc build recipes/layer.toml -> $OUT/layer/ (bundle, report). The per-bucket
#            cache is packed into $OUT/aotc-cache.tar even when BUILD_LIMIT seconds cut the
#            build short; carried back as .gpu/aotc-cache.tar, the next build resumes there
#   profile  benchmarks/model_load_profile.py: where time to ready goes, threads 0 and 8
#   bench    benchmarks/model_bench.py (time to ready and per-bucket latency)
# LAYER_BUNDLE: an existing bundle to use instead of building one; RECIPE: another recipe
# of the layer (default recipes/layer.toml), e.g. fewer buckets.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT/layer"
STAGES=${STAGES:-build tests profile bench}
if ! python3 -c 'import zstandard' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 AOTC_CACHE_DIR=${AOTC_CACHE_DIR:-/tmp/aotc-cache}
mkdir -p "$AOTC_CACHE_DIR"
[[ -f .gpu/aotc-cache.tar ]] && tar -xf .gpu/aotc-cache.tar -C "$AOTC_CACHE_DIR"
RECIPE=${RECIPE:-recipes/layer.toml}
BUNDLE=${LAYER_BUNDLE:-$OUT/layer/layer-0.1.0.aotc}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
rc=0
if [[ " $STAGES " == *" build "* ]]; then
  start=$(date +%s)
  timeout "${BUILD_LIMIT:-420}" python3 -m aot.cli build "$RECIPE" -o "$BUNDLE" \
    2>&1 | tee "$OUT/build.log" | tail -4
  echo "build wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/build.log"
  tar -cf "$OUT/aotc-cache.tar" -C "$AOTC_CACHE_DIR" .
  python3 -m aot.cli inspect "$BUNDLE" > "$OUT/inspect.txt" 2>&1; ls -l "$BUNDLE"
fi
if [[ " $STAGES " == *" tests "* ]]; then
  layer=""; [[ -f "$BUNDLE" ]] && layer=$BUNDLE
  AOTC_TEST_LAYER_BUNDLE=$layer AOTC_TEST_LAYER_RECIPE=$PWD/$RECIPE python3 -m pytest -q -s -m gpu tests/gpu/test_model_gpu.py \
    -p no:cacheprovider -k "${TESTS:-}" 2>&1 | tee "$OUT/gpu-tests.log" | grep -E '^\{|passed|failed|error' | tail -6
  rc=${PIPESTATUS[0]}
fi
if [[ " $STAGES " == *" profile "* && -f "$BUNDLE" ]]; then
  for threads in ${PROFILE_THREADS:-0 8}; do
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d) python3 \
      benchmarks/model_load_profile.py --bundle "$BUNDLE" --threads $threads \
      --profile "$OUT/load-profile.txt" 2>>"$OUT/profile.err" | tee -a "$OUT/profile.jsonl"
  done
fi
if [[ " $STAGES " == *" bench "* && -f "$BUNDLE" ]]; then
  python3 benchmarks/model_bench.py --recipe "$RECIPE" --bundle "$BUNDLE" --json "$OUT/model_bench.json" \
    ${BENCH_ARGS:-} 2>"$OUT/model_bench.err" | tee "$OUT/model_bench.log" | tail -22
fi
exit $rc
