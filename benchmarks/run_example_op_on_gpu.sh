#!/usr/bin/env bash
# The example recipe's op (issue 21, point 6) on an H100/H200, one call: `aotc build
# recipes/example.toml` tunes matmul, matmul_tma and rmsnorm on this GPU and routes each
# bucket of the op `gemm` to the faster of its two kernels; then the example GPU tests run
# on that bundle (every kernel and the op at every bucket and between). DB=<tuning database>
# reuses earlier measurements (e.g. benchmarks/data/h200-example.tunedb.jsonl.gz,
# decompressed: then only the kernels it lacks are measured). Logs, the report and the
# database come back in $OUT/example-op.tar.gz; a summary is printed last.
#   device: carry [".whl", <DB's folder>], command: DB=<path> bash benchmarks/run_example_op_on_gpu.sh
W=${W:-/tmp/aotc-example-op}
source benchmarks/gpu_run.sh
[[ -n "${DB:-}" ]] && cp "$DB" "$W/example.tunedb.jsonl"
pack() { (cd "$W" && tar czf "$OUT/example-op.tar.gz" logs example.report.md example.report \
  example.tunedb.jsonl 2>/dev/null); }
trap 'pack; cat "$S"' EXIT
stage build "${BUILD_LIMIT:-240}" python3 -m aot.cli build recipes/example.toml -o "$W/example.aotc" -j 16
grep -E "^(tuned|wrote|buckets)" "$W/logs/build.log" >> "$S"
pack
[[ -f "$W/example.aotc" ]] && AOTC_TEST_BUNDLE=$W/example.aotc stage tests "${TEST_LIMIT:-90}" \
  python3 -m pytest -q -s -m gpu tests/gpu/test_example_gpu.py -p no:cacheprovider -rf
grep -E "^(FAILED|ERROR)|routes:" "$W/logs/tests.log" 2>/dev/null | head -12 >> "$S"
