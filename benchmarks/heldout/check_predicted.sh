#!/usr/bin/env bash
# On a GPU machine (issue 19): the folder's check.py on the bundles predicted_bundles.sh
# wrote per recipe, the H200-tuned one and the cost model's CPU-only one (and, with
# KINDS="tuned predicted calibrated calibrated2", those calibrated on half the buckets,
# each half), one after the other: outputs against float64 and the library, then µs per call.
# Arguments: pairs of a library folder name and its recipes.
#   device: carry [".whl", ".gpu/ho", ".gpu/heldout-src"], command:
#   bash benchmarks/heldout/check_predicted.sh liger "rms_norm kl_div" fla logsumexp
# Every run's logs come back in one archive, $OUT/heldout-predicted.tar.gz (LIB-KIND/...: a
# device call returns at most 8 files); .gpu/heldout-src/LIB holds the library's package
# as costmodel_heldout.py lays it out.
set -uo pipefail
FINAL_OUT=${OUT:-gpu-out}
ROOT_OUT=$(mktemp -d)
trap 'mkdir -p "$FINAL_OUT"; tar czf "$FINAL_OUT/heldout-predicted.tar.gz" -C "$ROOT_OUT" .' EXIT
while (($# >= 2)); do
  lib=$1 recipes=$2
  shift 2
  for kind in ${KINDS:-tuned predicted}; do
    mkdir -p "$ROOT_OUT/$lib-$kind"
    env "${lib^^}=.gpu/heldout-src/$lib" OUT="$ROOT_OUT/$lib-$kind" RECIPES="$recipes" \
      W="$PWD/.gpu/ho/$lib-bundles/$kind" bash "benchmarks/heldout/$lib/run.sh" \
      > "$ROOT_OUT/$lib-$kind/run.log" 2>&1
    echo "$lib $kind: $(grep -E "^check-" "$ROOT_OUT/$lib-$kind/run.log" | tr '\n' ' ')"
  done
done
