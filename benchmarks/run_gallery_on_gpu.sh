#!/usr/bin/env bash
# One call on a GPU machine for the gallery (issue 18): build and tune every gallery recipe
# (and the shipped-kernel test recipe) on this GPU, run the gallery's GPU tests against
# those bundles, then benchmarks/gallery_bench.py. Everything lands in $OUT/gallery.tar.gz
# (logs, reports, tuning databases, the benchmark's JSON); a summary is printed
# last. STAGES picks stages (default "build tests bench"; "core" runs the other GPU tests
# on the example and MLP bundles carried in $CORE); KERNELS limits the benchmark and
# TEST_ARGS the tests (e.g. "-k moe"); RECIPES limits the builds (e.g. "shipped moe";
# default: shipped and every gallery recipe);
# SEED names a carried folder of bundles and tuning databases from an earlier call.
#
#   device: carry [".whl"], command: bash benchmarks/run_gallery_on_gpu.sh
set -uo pipefail
OUT=${OUT:-gpu-out}
W=${W:-/tmp/aotc-gallery}
mkdir -p "$OUT" "$W/bundles" "$W/logs" "$W/bench"
if ! python3 -c 'import zstandard' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export AOTC_CACHE_DIR=$W/cache AOTC_NO_PROGRESS=1 TRITON_CACHE_AUTOTUNING=1
STAGES=${STAGES:-"build tests bench"}
summary="$W/logs/summary.txt"
: > "$summary"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader >> "$summary"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >> "$summary" 2>&1

pack() {  # after every stage, so a call cut short still sends back what it had; the bundles
  # rebuild from their tuning databases, byte for byte: sent back only with BUNDLES=1
  (cd "$W" && tar czf "$OUT/gallery.tar.gz" logs bench bundles/*.report.md bundles/*.tunedb.jsonl \
    bundles/*.report ${BUNDLES:+bundles/*.aotc} 2>/dev/null)
}
trap 'pack; cat "$summary"' EXIT

build() {  # build RECIPE NAME: tune on this GPU, time it, keep the log. With SEED (a
  # carried folder): its NAME.aotc is used as it is, and its NAME.tunedb.jsonl is resumed
  # (only the measurements it lacks are taken).
  local start=$SECONDS rc
  if [[ -n "${SEED:-}" && -f "$SEED/$2.aotc" ]]; then
    cp "$SEED/$2.aotc" "$SEED/$2.tunedb.jsonl" "$W/bundles/" 2>/dev/null
    echo "build $2: carried" >> "$summary"
    return
  fi
  if [[ -n "${SEED:-}" && -f "$SEED/$2.tunedb.jsonl" ]]; then
    cp "$SEED/$2.tunedb.jsonl" "$W/bundles/"
  fi
  timeout "${BUILD_TIMEOUT:-240}" python3 -m aot.cli build "$1" -o "$W/bundles/$2.aotc" -j 16 \
    > "$W/logs/build-$2.log" 2>&1
  rc=$?
  echo "build $2: exit $rc in $((SECONDS - start)) s; $(grep -E '^(wrote|buckets|tuned)' "$W/logs/build-$2.log" | tr '\n' ' ')" >> "$summary"
}

wanted() { [[ -z "${RECIPES:-}" || " $RECIPES " == *" $1 "* ]]; }
if [[ " $STAGES " == *" build "* ]]; then
  wanted shipped && build tests/data/shipped/shipped.toml shipped
  for r in recipes/gallery/*.toml; do
    wanted "$(basename "$r" .toml)" && build "$r" "$(basename "$r" .toml)"
  done
fi

pack

if [[ " $STAGES " == *" tests "* ]]; then
  start=$SECONDS
  AOTC_GALLERY_BUNDLES=$W/bundles timeout "${TEST_TIMEOUT:-240}" python3 -m pytest -q -m gpu \
    tests/gpu/test_gallery_gpu.py -p no:cacheprovider -rf ${TEST_ARGS:-} > "$W/logs/gpu-tests.log" 2>&1
  echo "gallery GPU tests: exit $? in $((SECONDS - start)) s: $(tail -1 "$W/logs/gpu-tests.log")" >> "$summary"
  grep -E "^(FAILED|ERROR)" "$W/logs/gpu-tests.log" | head -20 >> "$summary"
  if [[ -f "$W/bundles/shipped.aotc" ]]; then  # the shipped recipe's own GPU tests
    start=$SECONDS
    AOTC_TEST_SHIPPED_BUNDLE=$W/bundles/shipped.aotc timeout 120 python3 -m pytest -q -m gpu \
      tests/gpu/test_shipped_gpu.py -p no:cacheprovider -rf > "$W/logs/shipped-tests.log" 2>&1
    echo "shipped GPU tests: exit $? in $((SECONDS - start)) s: $(tail -1 "$W/logs/shipped-tests.log")" >> "$summary"
  fi
fi

pack

if [[ " $STAGES " == *" bench "* ]]; then
  start=$SECONDS
  timeout "${BENCH_TIMEOUT:-330}" python3 benchmarks/gallery_bench.py --bundles "$W/bundles" \
    --out "$W/bench" --repeats "${REPEATS:-2}" ${KERNELS:+--kernels "$KERNELS"} ${BENCH_ARGS:-} \
    > "$W/logs/bench.log" 2>&1
  echo "gallery bench: exit $? in $((SECONDS - start)) s" >> "$summary"
  grep -vE "^\[gallery_bench\]" "$W/logs/bench.log" | tail -60 >> "$summary"
fi

pack

if [[ " $STAGES " == *" core "* ]]; then  # the other GPU tests, on bundles carried in $CORE
  start=$SECONDS
  AOTC_TEST_BUNDLE=$CORE/example.aotc AOTC_TEST_MLP_BUNDLE=$CORE/mlp.aotc \
    timeout "${CORE_TIMEOUT:-150}" python3 -m pytest -q -m gpu tests/gpu/test_example_gpu.py \
    tests/gpu/test_pipeline_gpu.py tests/gpu/test_tune_gpu.py -k "not end_to_end" \
    -p no:cacheprovider -rf > "$W/logs/core-tests.log" 2>&1
  echo "core GPU tests: exit $? in $((SECONDS - start)) s: $(tail -1 "$W/logs/core-tests.log")" >> "$summary"
  grep -E "^(FAILED|ERROR)" "$W/logs/core-tests.log" | head -20 >> "$summary"
fi
