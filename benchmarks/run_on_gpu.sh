#!/usr/bin/env bash
# One call on a GPU machine: GPU tests, then the benchmarks; logs under $OUT (or ./gpu-out).
# Expects the bundle built beforehand on the CPU machine (artifacts/) and, where zstandard
# is not installed, its wheel in .whl/ (see benchmarks/RESULTS.md for the exact command).
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
if ! python3 -c 'import zstandard' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export AOTC_TEST_BUNDLE=${AOTC_TEST_BUNDLE:-$PWD/artifacts/example-0.1.0.aotc}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.log"
tests=${PIPESTATUS[0]}
python3 benchmarks/launch_overhead.py --bundle "$AOTC_TEST_BUNDLE" --json "$OUT/launch_overhead.json" 2>&1 | tee "$OUT/launch_overhead.log"
echo "gpu tests exit code: $tests"
exit $tests
