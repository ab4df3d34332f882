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
# The logs, reports and tuning databases come back as one archive, $OUT/NAME.tar.gz (a
# device call returns at most 8 files), packed after every recipe, so a call cut short
# still sends back what it had.
pack() {
  (cd "$W" && tar czf "$OUT/$(basename "$HERE").tar.gz" logs ./*.report.md ./*.tunedb.jsonl 2>/dev/null)
}
for r in $RECIPES; do
  [[ -f "$W/$r.aotc" ]] || stage "build-$r" "${BUILD_LIMIT:-240}" python3 -m aot.cli build "$W/r/$r.toml" -o "$W/$r.aotc" -j 16
  stage "check-$r" 180 python3 "$W/r/check.py" "$r" "$W/$r.aotc"
  cat "$W/logs/check-$r.log"
  pack
done
cat "$S"
