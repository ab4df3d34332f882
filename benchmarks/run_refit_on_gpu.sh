#!/usr/bin/env bash
# The tuner's online refit of the learned cost model on a real GPU (issue 19), one call.
# Each of RECIPES (benchmarks/training/; by default grouped_gemm and w8_linear: 188 and
# 204 configs a bucket, 5 buckets each, kernels the shipped model never trained on, timed
# densely on the H100 in ../data/h100-training and on the H200 in
# h200-training-candidates) is tuned the default way, the `model` strategy in the learned
# model's order, with short patience (8 cold, 4 warm, budget 60: where the refit has a
# say), two ways in turn: as shipped, the model refitted to each bucket's measurements
# (`refit`), and the tuner as it was before (`additive`: the model's scores withheld, so
# the strategy moves locally by its additive surrogate), for each of SEEDS (0 1) while
# DEADLINE allows. benchmarks/refit_compare.py scores the picks by the same GPU's table.
#   device: carry [".whl"], command: bash benchmarks/run_refit_on_gpu.sh
# $OUT/refit.tar.gz: the runs' databases (RECIPE-MODE-sSEED.tunedb.jsonl.gz), logs/.
W=${W:-/tmp/aotc-refit}
source "$(dirname "$0")/gpu_run.sh"
DEADLINE=${DEADLINE:-480}
RECIPES=${RECIPES:-"grouped_gemm w8_linear"}
export AOTC_TUNE_TIMEOUT=${AOTC_TUNE_TIMEOUT:-30}
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >> "$S" 2>&1
# a machine kept warm keeps $W: every run starts from no database (the compile cache stays)
rm -rf "$W"/*.tunedb.jsonl "$W"/*.aotc "$W"/*.report.md "$W"/*.report "$W"/logs/*-s*.log
cleanup() {
  rm -f benchmarks/training/refit-*.toml
  mkdir -p "$OUT/refit"
  for f in "$W"/*.tunedb.jsonl; do [[ -f $f ]] && gzip -9nc "$f" > "$OUT/refit/$(basename "$f").gz"; done
  cp -r "$W/logs" "$OUT/refit/"
  tar czf "$OUT/refit.tar.gz" -C "$OUT" refit
  cat "$S"
}
trap cleanup EXIT
for name in $RECIPES; do  # beside the original: its sources are relative to it
  python3 - "benchmarks/training/$name.toml" "benchmarks/training/refit-$name.toml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r'strategy = "grid".*', 'strategy = "model"', text)
text = text.replace("budget = 1000", "budget = 60").replace("warm_patience = 1000", "warm_patience = 4")
text = text.replace("patience = 1000", "patience = 8")
open(sys.argv[2], "w").write(text)
PY
  echo "refit-$name.toml: $(grep -c 'strategy = "model"' "benchmarks/training/refit-$name.toml") kernels by the model strategy" >> "$S"
done
run() {  # RECIPE MODE SEED: one build, into its own database
  stage "$1-$2-s$3" "${LIMIT:-240}" python3 benchmarks/refit_tune.py \
    "benchmarks/training/refit-$1.toml" "$W/$1-$2-s$3" "$2" "$3"
}
# WARMUP=1: each recipe built and tuned once first, thrown away, so that every measured run
# finds the compile cache warm (the tuner's first-bucket order depends on which compiles
# have finished); the two modes then alternate which goes first, seed by seed
if [[ ${WARMUP:-0} == 1 ]]; then
  for name in $RECIPES; do run "$name" refit 99; rm -rf "$W/$name-refit-s99".*; done
fi
flip=0
for seed in ${SEEDS:-0 1}; do
  for name in $RECIPES; do
    modes="refit additive"
    if (( flip )); then modes="additive refit"; fi
    for mode in $modes; do
      if (( SECONDS < DEADLINE - 60 )); then run "$name" "$mode" "$seed"; fi
    done
  done
  flip=$(( 1 - flip ))
done
