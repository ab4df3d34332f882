#!/usr/bin/env bash
# On a GPU machine (issue 19): recipes/example.toml built as a user runs it, the learned
# cost model the default predictor: the tuner measures matmul's and rmsnorm's candidates
# in the model's order (patience 30, 15 warm: the recipe names no predictor), and the
# model picks the buckets no GPU here measures (sm_80's). gpu_run.sh installs lightgbm
# from .whl/costmodel/ where the machine lacks it.
#   device: carry [".whl"], command: bash benchmarks/run_default_tune_on_gpu.sh
# $OUT/default-tune.tar.gz: logs/ (summary.txt, build.log), the report and the database.
W=${W:-/tmp/aotc-default}
source "$(dirname "$0")/gpu_run.sh"
python3 -c 'import lightgbm, scipy; print("lightgbm", lightgbm.__version__, "scipy", scipy.__version__)' >> "$S" 2>&1
export AOTC_TUNE_TIMEOUT=${AOTC_TUNE_TIMEOUT:-30}
# DB=<a database a run cut short wrote>: this run resumes it (carry its folder too)
if [[ -n ${DB:-} ]]; then cp "$DB" "$W/example.tunedb.jsonl"; fi
stage build "${BUILD_LIMIT:-400}" python3 -m aot.cli build recipes/example.toml \
  -o "$W/example.aotc" -j 16 --tune-only "${ONLY:-matmul,rmsnorm}"
tar czf "$OUT/default-tune.tar.gz" -C "$W" logs $(cd "$W" && ls example.report.md example*.jsonl 2>/dev/null)
cat "$S"
