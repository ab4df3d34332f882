#!/usr/bin/env bash
# On a GPU machine: build cumsum.toml against an FLA checkout and run check.py.
#   FLA=<folder holding fla/ and einops/>   (a checkout's fla/ package and einops,
#   carried as .gpu/fla: `git archive HEAD fla | tar -x -C .gpu/fla`, and
#   `pip install --target .gpu/fla einops`)
#   device: carry [".whl", ".gpu/fla"], command: bash benchmarks/heldout/fla_cumsum/run.sh
set -uo pipefail
FLA=${FLA:-.gpu/fla}
W=${W:-/tmp/aotc-fla}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W/r" "$W/src"
cp "$HERE"/cumsum.toml "$HERE"/calls.py "$HERE"/check.py "$W/r/"
cp -r "$FLA"/fla "$W/src/"
source benchmarks/gpu_run.sh
export PYTHONPATH=$W/src:$W/r:$FLA:$PYTHONPATH
stage build 240 python3 -m aot.cli build "$W/r/cumsum.toml" -o "$W/cumsum.aotc" -j 16
stage check 120 python3 "$W/r/check.py" "$W/cumsum.aotc"
cp "$W"/logs/* "$W"/cumsum.report.md "$W"/cumsum.tunedb.jsonl "$OUT/" 2>/dev/null
cat "$W/logs/check.log"; cat "$S"
