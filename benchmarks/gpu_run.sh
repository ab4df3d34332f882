# Sourced by the one-call GPU scripts (run_hopper_on_gpu.sh, run_decode_on_gpu.sh,
# run_example_op_on_gpu.sh) after they set W (their work folder): makes $OUT and $W/logs,
# installs the carried zstandard wheel where the machine lacks it, points Python at this
# checkout and aotc's cache into $W, starts the summary $S with the GPU's name, and defines
#   stage NAME SECONDS COMMAND...   run with a time limit into $W/logs/NAME.log, and note
#                                   its exit code, time and last line in the summary.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT" "$W/logs"
if ! python3 -c 'import zstandard' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
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
