#!/usr/bin/env bash
# Model mode (recipes/layer.toml) on a GPU machine, in stages (unset: all; empty: none; e.g.
# STAGES="tests bench"). What comes back is three files under $OUT: the bundle
# (layer/…aotc), logs.tar.gz (every log, report and result) and aotc-cache.tar.gz.
#   build    aotc build $RECIPE -> $OUT/layer/. The per-bucket cache is packed into
#            aotc-cache.tar.gz even when BUILD_LIMIT seconds cut the build short; carried
#            back as .gpu/aotc-cache.tar.gz, the next build resumes where it stopped.
#            Inductor's autotuning results (its local cache, a few KiB of timings) come
#            back as inductor-autotune.tar.gz: carried as .gpu/inductor-autotune.tar.gz, a
#            resumed build does not benchmark again the matmul shapes tuned before it was
#            cut (the buckets share them: batch 4 x seq 128 has batch 1 x seq 512's). The
#            build's log holds Inductor's autotuning debug lines (per-choice times)
#   tests    tests/gpu/test_model_gpu.py (tiny model built here; the layer bundle if built)
#   profile  benchmarks/model_load_profile.py: where time to ready goes (threads 0 and 8)
#   overhead benchmarks/model_call_overhead.py at OVERHEAD_SHAPES (the loader against the
#            module at directly served buckets)
#   bench    benchmarks/model_bench.py (time to ready and per-bucket latency); BENCH_ARGS
#   aoti     benchmarks/probe_aoti.py (AOTInductor: does it load here, how fast); AOTI_ARGS
#            (not in the default stages)
# BUILD_ARGS: more options for aotc build, e.g. "--model-workers 4" (four compilations
# sharing one GPU: for a mode that does not autotune).
# LAYER_BUNDLE: an existing bundle to use instead of building one; RECIPE: another recipe
# of the layer (default recipes/layer.toml), e.g. fewer buckets.
set -uo pipefail
OUT=${OUT:-gpu-out}; LOGS=$OUT/logs; mkdir -p "$OUT/layer" "$LOGS"
STAGES=${STAGES-build tests profile bench}  # set but empty: no stage (setup only)
if ! python3 -c 'import zstandard' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 AOTC_CACHE_DIR=${AOTC_CACHE_DIR:-/tmp/aotc-cache}
mkdir -p "$AOTC_CACHE_DIR"
[[ -f .gpu/aotc-cache.tar.gz ]] && tar -xzf .gpu/aotc-cache.tar.gz -C "$AOTC_CACHE_DIR"
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor}
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
[[ -f .gpu/inductor-autotune.tar.gz ]] && tar -xzf .gpu/inductor-autotune.tar.gz -C "$TORCHINDUCTOR_CACHE_DIR"
# The GPU image ships no .pyc files: without a bytecode cache every fresh Python process
# compiles torch's sources again (seconds of its time to ready), which a deployed image,
# installed by pip, would not. PYCACHE="" turns this off.
PYCACHE=${PYCACHE-/tmp/pyc}
if [[ -n "$PYCACHE" ]]; then
  export PYTHONPYCACHEPREFIX=$PYCACHE
  python3 -c 'import torch, torch._dynamo, torch._inductor.standalone_compile, loader, aot.cli'
fi
RECIPE=${RECIPE:-recipes/layer.toml}
BUNDLE=${LAYER_BUNDLE:-$OUT/layer/layer-0.1.0.aotc}
pack() { tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOGS"; }
trap pack EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
rc=0
if [[ " $STAGES " == *" build "* ]]; then
  start=$(date +%s)
  TORCH_LOGS=+torch._inductor.select_algorithm \
  timeout -k 10 "${BUILD_LIMIT:-420}" python3 -m aot.cli build "$RECIPE" -o "$BUNDLE" \
    ${BUILD_ARGS:-} 2>&1 | tee "$LOGS/build.log" | grep -E '^model|^wrote|rror' | tail -8
  echo "build wall time: $(( $(date +%s) - start )) s" | tee -a "$LOGS/build.log"
  tar -czf "$OUT/aotc-cache.tar.gz" -C "$AOTC_CACHE_DIR" .
  tar -czf "$OUT/inductor-autotune.tar.gz" -C "$TORCHINDUCTOR_CACHE_DIR" cache
  if [[ -f "$BUNDLE" ]]; then
    python3 -m aot.cli inspect "$BUNDLE" > "$LOGS/inspect.txt" 2>&1; ls -l "$BUNDLE"
    cp "${BUNDLE%.aotc}.report.md" "$LOGS/" 2>/dev/null
  fi
fi
if [[ " $STAGES " == *" tests "* ]]; then
  layer=""; [[ -f "$BUNDLE" ]] && layer=$BUNDLE
  AOTC_TEST_LAYER_BUNDLE=$layer AOTC_TEST_LAYER_RECIPE=$PWD/$RECIPE python3 -m pytest -q -s \
    -m gpu tests/gpu/test_model_gpu.py -p no:cacheprovider -k "${TESTS:-}" 2>&1 \
    | tee "$LOGS/gpu-tests.log" | grep -E '^\{|passed|failed|rror' | tail -8
  rc=${PIPESTATUS[0]}
fi
if [[ " $STAGES " == *" profile "* && -f "$BUNDLE" ]]; then
  for threads in ${PROFILE_THREADS:-0 8}; do
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d) python3 \
      benchmarks/model_load_profile.py --bundle "$BUNDLE" --threads $threads \
      --profile "$LOGS/load-profile.txt" 2>>"$LOGS/profile.err" | tee -a "$LOGS/profile.jsonl"
  done
fi
if [[ " $STAGES " == *" overhead "* && -f "$BUNDLE" ]]; then
  python3 benchmarks/model_call_overhead.py --bundle "$BUNDLE" \
    ${OVERHEAD_SHAPES:-4x2048 16x512 16x2048 32x512 32x2048} 2>>"$LOGS/overhead.err" \
    | tee "$LOGS/call-overhead.jsonl"
fi
if [[ " $STAGES " == *" bench "* && -f "$BUNDLE" ]]; then
  python3 benchmarks/model_bench.py --recipe "$RECIPE" --bundle "$BUNDLE" \
    --json "$LOGS/model_bench.json" ${BENCH_ARGS:-} 2>"$LOGS/model_bench.err" \
    | tee "$LOGS/model_bench.log" | tail -26
fi
if [[ " $STAGES " == *" aoti "* ]]; then
  timeout -k 10 "${AOTI_LIMIT:-300}" python3 benchmarks/probe_aoti.py ${AOTI_ARGS:-} \
    2>"$LOGS/aoti.err" | tee "$LOGS/aoti.jsonl" | cut -c1-400
fi
exit $rc
