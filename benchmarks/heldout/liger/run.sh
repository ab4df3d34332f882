#!/usr/bin/env bash
# On a GPU machine: build this folder's recipes against a Liger-Kernel checkout (tuned on
# this GPU) and run check.py on each bundle.
#   LIGER=<folder holding liger_kernel/ and packaging/>: a checkout's package (`git archive
#   HEAD src/liger_kernel | tar -x`, then move src/liger_kernel up) and `pip install
#   --target <folder> packaging`, carried as .gpu/liger. RECIPES picks recipes (default:
#   "rms_norm swiglu kl_div rope cross_entropy"; also rms_norm_rule).
#   device: carry [".whl", ".gpu/liger"], command: bash benchmarks/heldout/liger/run.sh
RECIPES=${RECIPES:-rms_norm swiglu kl_div rope cross_entropy} W=${W:-/tmp/aotc-liger} \
  exec bash "$(dirname "$0")/../run_library.sh" "$(dirname "$0")" "${LIGER:-.gpu/liger}" liger_kernel
