#!/usr/bin/env bash
# On a GPU machine: build this folder's recipe against mamba_ssm's kernel (tuned on this
# GPU) and run check.py on the bundle.
#   MAMBA=<folder holding mamba_ssm/>: from a checkout, the kernel file and the one module
#   it imports, unchanged, with empty package __init__.py files in place of mamba_ssm's
#   (its own imports the whole model: causal_conv1d, selective_scan_cuda, ...):
#     D=<this repository>/.gpu/mamba; mkdir -p $D; cd <mamba checkout>
#     git archive HEAD mamba_ssm/ops/triton/{selective_state_update,softplus}.py | tar -x -C $D
#     touch $D/mamba_ssm/__init__.py $D/mamba_ssm/ops/__init__.py $D/mamba_ssm/ops/triton/__init__.py
#   carried as .gpu/mamba. stubs/ stands in for einops, which that file imports at module
#   level for its PyTorch reference only.
#   device: carry [".whl", ".gpu/mamba"], command: bash benchmarks/heldout/mamba/run.sh
export PYTHONPATH=$(cd "$(dirname "$0")" && pwd)/stubs${PYTHONPATH:+:$PYTHONPATH}
RECIPES=${RECIPES:-selective_state_update} W=${W:-/tmp/aotc-mamba} \
  exec bash "$(dirname "$0")/../run_library.sh" "$(dirname "$0")" "${MAMBA:-.gpu/mamba}" mamba_ssm
