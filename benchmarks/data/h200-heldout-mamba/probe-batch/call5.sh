#!/usr/bin/env bash
# call 5: mamba's bmm_chunk at batch 1 and 2 x 16384, the bundle against each of mamba's configs
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks/heldout/mamba/stubs:$PWD/.gpu/mb/src:$PWD/benchmarks/heldout/mamba
export AOTC_NO_PROGRESS=1 AOTC_CACHE_DIR=/tmp/c
timeout 150 python3 benchmarks/heldout/mamba/probe_batch.py .gpu/mb/bmm_chunk.aotc --json "$OUT/probe_batch.json" 2>&1 | tee "$OUT/probe_batch.log" | tail -30
