# Sourced by the one-call GPU scripts (run_hopper_on_gpu.sh, run_decode_on_gpu.sh,
# run_example_op_on_gpu.sh, ...) after they set W (their work folder): makes $OUT and
# $W/logs, installs the carried zstandard wheel and lightgbm where the machine lacks them,
# points Python at this checkout and aotc's cache into $W, starts the summary $S with the
# GPU's name, and defines
#   stage NAME SECONDS COMMAND...   run with a time limit into $W/logs/NAME.log, and note
#                                   its exit code, time and last line in the summary.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT" "$W/logs"
if ! python3 -c 'import zstandard' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# lightgbm (the learned cost model, aotc's default predictor) where the machine lacks it,
# from .whl/costmodel/ (made by benchmarks/costmodel_wheels.sh: its wheel, and scipy.sparse
# alone where scipy is missing too). Without them a build says "cost model unavailable"
# and uses the heuristic.
if ! python3 -c 'import lightgbm' 2>/dev/null && [[ -d .whl/costmodel ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-costmodel \
    .whl/costmodel/*.whl || exit 1
  if ! python3 -c 'import scipy.sparse' 2>/dev/null; then
    tar xzf .whl/costmodel/scipy-sparse-only.tar.gz -C /tmp/site-costmodel || exit 1
  fi
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site-costmodel  # after the machine's own
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export AOTC_CACHE_DIR=$W/cache AOTC_NO_PROGRESS=1
S="$W/logs/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$S" 2>&1
stage() {
  local name=$1 limit=$2 start=$SECONDS; shift 2
  timeout -k 5 "$limit" "$@" > "$W/logs/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - start)) s: $(tail -1 "$W/logs/$name.log")" >> "$S"
}
