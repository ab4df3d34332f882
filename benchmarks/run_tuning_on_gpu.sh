#!/usr/bin/env bash
# One call on a GPU machine: the GPU tests, a full tune of the example recipe (timed), and
# the tuned bundle's quality against cuBLAS/PyTorch. Logs and results under $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 AOTC_CACHE_DIR=/tmp/aotc-cache
export AOTC_TEST_BUNDLE=$PWD/artifacts/example-0.1.0.aotc
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.log" | tail -5
mkdir -p /tmp/tuned
start=$(date +%s)
timeout ${TUNE_LIMIT:-420} python3 -m aot.cli build recipes/example.toml -o /tmp/tuned/example-0.1.0.aotc 2>&1 | tee "$OUT/tune.log" | grep -v "^tune\|^compile" | tail -8
echo "full tune + build wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/tune.log"
tar -C /tmp -czf "$OUT/tuned.tgz" tuned
python3 benchmarks/tune_quality.py --bundle /tmp/tuned/example-0.1.0.aotc --json "$OUT/quality.json" 2>&1 | tee "$OUT/quality.log" | tail -60
