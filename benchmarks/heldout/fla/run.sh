#!/usr/bin/env bash
# On a GPU machine: build this folder's recipes against an FLA checkout (tuned on this
# GPU) and run check.py on each bundle.
#   FLA=<folder holding fla/ and einops/>: a checkout's fla/ package and einops, carried
#   as .gpu/fla (`git archive HEAD fla | tar -x -C .gpu/fla`; `pip install --target
#   .gpu/fla einops`). RECIPES picks recipes (default: "cumsum logsumexp").
#   device: carry [".whl", ".gpu/fla"], command: bash benchmarks/heldout/fla/run.sh
set -uo pipefail
FLA=${FLA:-.gpu/fla}
W=${W:-/tmp/aotc-fla}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W/r" "$W/src"
cp "$HERE"/*.toml "$HERE"/calls.py "$HERE"/check.py "$W/r/"
cp -r "$FLA"/fla "$W/src/"
source benchmarks/gpu_run.sh
export PYTHONPATH=$W/src:$W/r:$FLA:$PYTHONPATH
for r in ${RECIPES:-cumsum logsumexp}; do
  [[ -f "$W/$r.aotc" ]] || stage "build-$r" 240 python3 -m aot.cli build "$W/r/$r.toml" -o "$W/$r.aotc" -j 16
  stage "check-$r" 120 python3 "$W/r/check.py" "$r" "$W/$r.aotc"
  cp "$W/$r.report.md" "$W/$r.tunedb.jsonl" "$OUT/" 2>/dev/null
  cat "$W/logs/check-$r.log"
done
cp "$W"/logs/* "$OUT/"
cat "$S"
