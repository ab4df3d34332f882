#!/usr/bin/env bash
# On a GPU machine: build this folder's recipes against a Liger-Kernel checkout (tuned on
# this GPU) and run check.py on each bundle.
#   LIGER=<folder holding liger_kernel/ and packaging/>: a checkout's package (`git archive
#   HEAD src/liger_kernel | tar -x`, then move src/liger_kernel up) and `pip install
#   --target <folder> packaging`, carried as .gpu/liger. RECIPES picks recipes (default:
#   "rms_norm swiglu").
#   device: carry [".whl", ".gpu/liger"], command: bash benchmarks/heldout/liger/run.sh
set -uo pipefail
LIGER=${LIGER:-.gpu/liger}
W=${W:-/tmp/aotc-liger}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W/r" "$W/src"
cp "$HERE"/*.toml "$HERE"/calls.py "$HERE"/check.py "$W/r/"
cp -r "$LIGER"/liger_kernel "$W/src/"
source benchmarks/gpu_run.sh
export PYTHONPATH=$W/src:$W/r:$LIGER:$PYTHONPATH
for r in ${RECIPES:-rms_norm swiglu}; do
  [[ -f "$W/$r.aotc" ]] || stage "build-$r" 240 python3 -m aot.cli build "$W/r/$r.toml" -o "$W/$r.aotc" -j 16
  stage "check-$r" 180 python3 "$W/r/check.py" "$r" "$W/$r.aotc"
  cp "$W/$r.report.md" "$W/$r.tunedb.jsonl" "$OUT/" 2>/dev/null
  cat "$W/logs/check-$r.log"
done
cp "$W"/logs/* "$OUT/"
cat "$S"
