#!/usr/bin/env bash
# On a GPU machine: build a held-out library folder's recipes against that library's
# package (tuned on this GPU) and run the folder's check.py on each bundle. Called by the
# folders' run.sh:
#   bash benchmarks/heldout/run_library.sh FOLDER CARRIED PACKAGE...
# FOLDER holds *.toml, calls.py and check.py; CARRIED is the carried folder holding the
# PACKAGEs (copied beside the recipes, whose sources read ../src/PACKAGE/...) and their
# dependencies (put on PYTHONPATH). RECIPES names the recipes to build and check; W the
# work folder; BUILD_LIMIT the seconds a build may take (default 240).
set -uo pipefail
HERE=$(cd "$1" && pwd)
CARRIED=$2
shift 2
W=${W:-/tmp/aotc-$(basename "$HERE")}
mkdir -p "$W/r" "$W/src"
cp "$HERE"/*.toml "$HERE"/calls.py "$HERE"/check.py "$HERE"/../report.py "$W/r/"
for package in "$@"; do cp -r "$CARRIED/$package" "$W/src/"; done
source benchmarks/gpu_run.sh
export PYTHONPATH=$W/src:$W/r:$CARRIED:$PYTHONPATH
for r in $RECIPES; do
  [[ -f "$W/$r.aotc" ]] || stage "build-$r" "${BUILD_LIMIT:-240}" python3 -m aot.cli build "$W/r/$r.toml" -o "$W/$r.aotc" -j 16
  stage "check-$r" 180 python3 "$W/r/check.py" "$r" "$W/$r.aotc"
  cp "$W/$r.report.md" "$W/$r.tunedb.jsonl" "$OUT/" 2>/dev/null
  cat "$W/logs/check-$r.log"
done
cp "$W"/logs/* "$OUT/"
cat "$S"
