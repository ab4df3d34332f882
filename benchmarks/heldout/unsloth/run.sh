#!/usr/bin/env bash
# On a GPU machine: build this folder's recipes against unsloth's kernels (tuned on this
# GPU) and run check.py on each bundle.
#   UNSLOTH=<folder holding unsloth/>: from a checkout, the kernel files and the two
#   modules they import, unchanged, with empty package __init__.py files in place of
#   unsloth's (its own imports its whole training stack: transformers, unsloth_zoo, ...):
#     D=<this repository>/.gpu/unsloth; mkdir -p $D; cd <unsloth checkout>
#     git archive HEAD unsloth/device_type.py unsloth/bnb_availability.py \
#       unsloth/kernels/{utils,fp8,rms_layernorm,rope_embedding,swiglu,geglu}.py \
#       | tar -x -C $D && touch $D/unsloth/__init__.py $D/unsloth/kernels/__init__.py
#   carried as .gpu/unsloth. stubs/ stands in for the two third-party packages those files
#   import at module level (unsloth_zoo, transformers) and never use in a kernel. RECIPES
#   picks recipes (default: "rms_layernorm rope swiglu").
#   device: carry [".whl", ".gpu/unsloth"], command: bash benchmarks/heldout/unsloth/run.sh
export PYTHONPATH=$(cd "$(dirname "$0")" && pwd)/stubs${PYTHONPATH:+:$PYTHONPATH}
RECIPES=${RECIPES:-rms_layernorm rope swiglu} W=${W:-/tmp/aotc-unsloth} \
  exec bash "$(dirname "$0")/../run_library.sh" "$(dirname "$0")" "${UNSLOTH:-.gpu/unsloth}" unsloth
