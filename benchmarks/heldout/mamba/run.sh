#!/usr/bin/env bash
# On a GPU machine: build this folder's recipes against mamba_ssm's kernels (tuned on this
# GPU) and run check.py on each bundle. The kernel files import `packaging` (a version
# test), which must be importable there: `pip download packaging --no-deps -d .whl` puts its
# wheel beside zstandard's, and gpu_run.sh installs both.
#   MAMBA=<folder holding mamba_ssm/>: from a checkout, the kernel files and the modules
#   they import, unchanged, with empty package __init__.py files in place of mamba_ssm's
#   (its own imports the whole model: causal_conv1d, selective_scan_cuda, ...):
#     D=<this repository>/.gpu/mamba; mkdir -p $D; cd <mamba checkout>
#     git archive HEAD mamba_ssm/ops/triton/{selective_state_update,softplus,ssd_bmm}.py \
#       mamba_ssm/utils/determinism.py | tar -x -C $D
#     touch $D/mamba_ssm/{,ops/,ops/triton/,utils/}__init__.py
#   carried as .gpu/mamba. stubs/ stands in for einops, which those files import at module
#   level for their PyTorch code only. RECIPES picks recipes (default: both).
#   device: carry [".whl", ".gpu/mamba"], command: bash benchmarks/heldout/mamba/run.sh
export PYTHONPATH=$(cd "$(dirname "$0")" && pwd)/stubs${PYTHONPATH:+:$PYTHONPATH}
RECIPES=${RECIPES:-selective_state_update bmm_chunk} W=${W:-/tmp/aotc-mamba} \
  exec bash "$(dirname "$0")/../run_library.sh" "$(dirname "$0")" "${MAMBA:-.gpu/mamba}" mamba_ssm
