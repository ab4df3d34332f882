#!/usr/bin/env bash
# The MLP pipeline on a GPU machine, in stages (default: all; e.g. STAGES="tests bench"):
#   tune   build recipes/mlp.toml with tuning; the bundle and its tuning database go to
#          $OUT/tuned/ (bring the database back to rebuild the same bundle on any machine)
#   tests  the GPU tests (pipeline and example kernels) against that bundle
#   bench  benchmarks/pipeline_bench.py and benchmarks/launch_overhead.py
# Logs under $OUT. Where zstandard/optuna are missing, their wheels come from .whl/.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
STAGES=${STAGES:-tune tests bench}
if ! python3 -c 'import zstandard, optuna' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 AOTC_CACHE_DIR=${AOTC_CACHE_DIR:-/tmp/aotc-cache}
BUNDLE=${MLP_BUNDLE:-$OUT/tuned/llama-mlp-0.1.0.aotc}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
rc=0
if [[ " $STAGES " == *" tune "* ]]; then
  mkdir -p "$OUT/tuned"
  start=$(date +%s)
  timeout "${TUNE_LIMIT:-480}" python3 -m aot.cli build recipes/mlp.toml -o "$BUNDLE" --no-progress \
    2>&1 | tee "$OUT/tune.log" | tail -6
  echo "tune + build wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/tune.log"
  gzip -kf "${BUNDLE%.aotc}.tunedb.jsonl"
fi
if [[ " $STAGES " == *" tests "* ]]; then
  AOTC_TEST_MLP_BUNDLE=$BUNDLE AOTC_TEST_BUNDLE=${AOTC_TEST_BUNDLE:-$PWD/artifacts/example-0.1.0.aotc} \
    python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -k "${TESTS:-not tune}" \
    2>&1 | tee "$OUT/gpu-tests.log" | tail -4
  rc=${PIPESTATUS[0]}
fi
if [[ " $STAGES " == *" bench "* ]]; then
  python3 benchmarks/pipeline_bench.py --bundle "$BUNDLE" --json "$OUT/pipeline_bench.json" \
    ${BENCH_ARGS:-} 2>"$OUT/pipeline_bench.err" | tee "$OUT/pipeline_bench.log"
  python3 benchmarks/launch_overhead.py --bundle "${AOTC_TEST_BUNDLE:-artifacts/example-0.1.0.aotc}" \
    --json "$OUT/launch_overhead.json" 2>&1 | tee "$OUT/launch_overhead.log" | tail -14
fi
exit $rc
