#!/usr/bin/env bash
# On a GPU machine: build this folder's recipes against an FLA checkout (tuned on this
# GPU) and run check.py on each bundle.
#   FLA=<folder holding fla/ and einops/>: a checkout's fla/ package and einops, carried
#   as .gpu/fla (`git archive HEAD fla | tar -x -C .gpu/fla`; `pip install --target
#   .gpu/fla einops`). RECIPES picks recipes (default: "cumsum logsumexp").
#   device: carry [".whl", ".gpu/fla"], command: bash benchmarks/heldout/fla/run.sh
RECIPES=${RECIPES:-cumsum logsumexp} W=${W:-/tmp/aotc-fla} \
  exec bash "$(dirname "$0")/../run_library.sh" "$(dirname "$0")" "${FLA:-.gpu/fla}" fla
