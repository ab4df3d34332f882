#!/usr/bin/env bash
# On the CPU (issue 19: the learned cost model's CPU-only picks, on kernels it never
# trained on): for each named recipe of a held-out library folder, two bundles for the
# folder's check.py to time side by side on a GPU:
#   $OUTDIR/tuned/RECIPE.aotc      from the recipe's committed H200 tuning database (every
#                                  bucket measured: what the GPU build shipped); where
#                                  DATA has none, not built (the GPU run tunes it)
#   $OUTDIR/predicted/RECIPE.aotc  `aotc build --no-tune --predict cost-model`: the picks of
#                                  the model aotc ships, made without a GPU
#   $OUTDIR/calibrated/RECIPE.aotc the same with the tuning database's every other bucket
#                                  (benchmarks/half_db.py): those measured, the others the
#                                  model's, calibrated on them; where DATA has a database
#   $OUTDIR/calibrated2/RECIPE.aotc the same with the other half of the buckets measured
# Usage:
#   bash benchmarks/heldout/predicted_bundles.sh FOLDER CARRIED PACKAGE DATA OUTDIR RECIPE...
# e.g. (Liger at ead96b61 in .gpu/ho/liger, as benchmarks/heldout/liger/run.sh describes):
#   bash benchmarks/heldout/predicted_bundles.sh benchmarks/heldout/liger .gpu/ho/liger \
#     liger_kernel benchmarks/data/h200-heldout-liger .gpu/ho/liger-bundles rms_norm kl_div
# then on the GPU, per kind (the run skips the build where the bundle is there already):
#   W=$PWD/.gpu/ho/liger-bundles/tuned RECIPES="rms_norm kl_div" LIGER=.gpu/ho/liger \
#     bash benchmarks/heldout/liger/run.sh
set -euo pipefail
HERE=$(cd "$1" && pwd) CARRIED=$(cd "$2" && pwd) PACKAGE=$3 DATA=$(cd "$4" && pwd) OUTDIR=$5
shift 5
L=$(mktemp -d)  # the layout run_library.sh gives a run: recipes in r/, the package in src/
trap 'rm -rf "$L"' EXIT
mkdir -p "$L/r" "$L/src" "$OUTDIR/tuned" "$OUTDIR/predicted" "$OUTDIR/calibrated" \
  "$OUTDIR/calibrated2"
HALF=$(cd "$(dirname "$0")/.." && pwd)/half_db.py
cp "$HERE"/*.toml "$HERE"/calls.py "$L/r/"
cp -r "$CARRIED/$PACKAGE" "$L/src/"
export PYTHONPATH=$L/src:$L/r:$CARRIED${PYTHONPATH:+:$PYTHONPATH}
if [[ -d "$HERE/stubs" ]]; then export PYTHONPATH=$HERE/stubs:$PYTHONPATH; fi  # as run.sh has it
for r in "$@"; do
  if [[ -f "$DATA/$r.tunedb.jsonl.gz" ]]; then
    gunzip -c "$DATA/$r.tunedb.jsonl.gz" > "$L/$r.tunedb.jsonl"
    python3 -m aot.cli build "$L/r/$r.toml" -o "$OUTDIR/tuned/$r.aotc" --no-tune --db "$L/$r.tunedb.jsonl"
    python3 "$HALF" "$L/$r.tunedb.jsonl" "$L/$r.half.tunedb.jsonl"
    python3 -m aot.cli build "$L/r/$r.toml" -o "$OUTDIR/calibrated/$r.aotc" --no-tune \
      --predict cost-model --db "$L/$r.half.tunedb.jsonl"
    python3 "$HALF" --odd "$L/$r.tunedb.jsonl" "$L/$r.half2.tunedb.jsonl"
    python3 -m aot.cli build "$L/r/$r.toml" -o "$OUTDIR/calibrated2/$r.aotc" --no-tune \
      --predict cost-model --db "$L/$r.half2.tunedb.jsonl"
  else  # no committed database: the GPU run builds and tunes the tuned bundle itself
    echo "$r: no $DATA/$r.tunedb.jsonl.gz; only the predicted bundle" >&2
  fi
  python3 -m aot.cli build "$L/r/$r.toml" -o "$OUTDIR/predicted/$r.aotc" --no-tune --predict cost-model \
    --db "$L/$r.empty.jsonl"
done
