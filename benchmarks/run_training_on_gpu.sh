#!/usr/bin/env bash
# The cost model's training kernels (issue 19, point 4) on an H100/H200, one call: every
# recipe of benchmarks/training/ built and tuned on this GPU with the `grid` strategy and
# no early stop (every config of the space timed at every bucket), one stage per recipe,
# each with a time limit and all within DEADLINE seconds. Each tuning database comes back
# gzipped, with its build's report and log, in $OUT/training.tar.gz; a table of what each
# database holds is printed last. benchmarks/training/README.md says what to do with them.
#   device: carry [".whl"], command: bash benchmarks/run_training_on_gpu.sh
# KERNELS picks recipes (file stems, in order; the candidates measured and left out of the
# training set, linear_splitk, grouped_gemm, causal_conv1d, split_combine and w8_linear, only
# when named: benchmarks/data/h200-training-candidates/); SEED names a
# carried folder of earlier NAME.tunedb.jsonl(.gz) files, whose measurements are kept and
# not taken again.
W=${W:-/tmp/aotc-training}
source benchmarks/gpu_run.sh
mkdir -p "$OUT/training"
DEADLINE=${DEADLINE:-450}  # seconds for all builds of one call (README.md: the set takes two)
KERNELS=${KERNELS:-"attention layernorm row_stats cross_entropy bias_gelu transpose bmm qk_norm"}
# per recipe: about twice benchmarks/training/estimate.py's figure, plus start-up
declare -A LIMIT=([attention]=110 [layernorm]=90 [row_stats]=90 [cross_entropy]=80
                  [bias_gelu]=70 [transpose]=60 [bmm]=300 [qk_norm]=60 [grouped_gemm]=110
                  [causal_conv1d]=100 [split_combine]=60 [w8_linear]=110
                  [linear_splitk]=260)
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >> "$S" 2>&1

collect() {  # after every stage, so that a call cut short still sends back what it had;
  # one archive, since a call sends back at most 8 files
  local db
  for db in "$W"/*.tunedb.jsonl; do
    [[ -f "$db" ]] && gzip -9nc "$db" > "$OUT/training/$(basename "$db").gz"
  done
  cp "$W"/*.report.md "$OUT/training/" 2>/dev/null
  mkdir -p "$OUT/training/logs" && cp "$W"/logs/*.log "$S" "$OUT/training/logs/" 2>/dev/null
  tar czf "$OUT/training.tar.gz" -C "$OUT" --exclude training.tar.gz training
}

table() {  # what each database holds: buckets, configs timed, failures, re-measurements
  python3 - "$W" <<'EOF'
import collections, json, pathlib, sys
print(f"{'database':<34}{'buckets':>8}{'timed':>7}{'per bucket':>11}{'failed':>7}{'finals':>7}{'verified':>9}")
for db in sorted(pathlib.Path(sys.argv[1]).glob("*.tunedb.jsonl")):
    recs = [json.loads(line) for line in db.read_text().splitlines() if line.strip()]
    kind = collections.Counter((r["kind"], r["ok"]) for r in recs)
    buckets = collections.Counter(
        (r["kernel"], json.dumps(r["dtypes"], sort_keys=True), json.dumps(r["problem"], sort_keys=True))
        for r in recs if r["kind"] == "bench" and r["ok"])
    per = min(buckets.values(), default=0), max(buckets.values(), default=0)
    print(f"{db.name:<34}{len(buckets):>8}{kind['bench', True]:>7}{f'{per[0]}-{per[1]}':>11}"
          f"{kind['bench', False]:>7}{kind['final', True]:>7}"
          f"{kind['verify', True]:>5}/{kind['verify', True] + kind['verify', False]}")
EOF
}

trap 'collect; cat "$S"' EXIT
for name in $KERNELS; do
  recipe=benchmarks/training/$name.toml
  [[ -f "$recipe" ]] || { echo "$name: no $recipe" >> "$S"; continue; }
  if [[ -n "${SEED:-}" ]]; then  # resume: only the measurements the seed lacks are taken
    if [[ -f "$SEED/$name.tunedb.jsonl.gz" ]]; then
      gunzip -c "$SEED/$name.tunedb.jsonl.gz" > "$W/$name.tunedb.jsonl"
    elif [[ -f "$SEED/$name.tunedb.jsonl" ]]; then
      cp "$SEED/$name.tunedb.jsonl" "$W/"
    fi
  fi
  left=$((DEADLINE - SECONDS))
  limit=${LIMIT[$name]:-90}
  ((limit > left)) && limit=$left
  if ((limit < 20)); then
    echo "$name: skipped, $left s left of DEADLINE=$DEADLINE" >> "$S"
    continue
  fi
  stage "$name" "$limit" python3 -m aot.cli build "$recipe" -o "$W/$name.aotc" -j 16
  collect
done
table >> "$S" 2>&1
