#!/usr/bin/env bash
# On a GPU machine: build this folder's recipe against lightllm's kernel (tuned on this
# GPU) and run check.py on the bundle.
#   LIGHTLLM=<folder holding lightllm/>: from a checkout, the kernel file, unchanged (it
#   imports only torch and triton), with empty package __init__.py files in place of
#   lightllm's (its own imports the whole server):
#     D=<this repository>/.gpu/lightllm; mkdir -p $D; cd <lightllm checkout>
#     git archive HEAD lightllm/models/llama/triton_kernel/rotary_emb.py | tar -x -C $D
#     touch $D/lightllm/{,models/,models/llama/,models/llama/triton_kernel/}__init__.py
#   carried as .gpu/lightllm.
#   device: carry [".whl", ".gpu/lightllm"], command: bash benchmarks/heldout/lightllm/run.sh
RECIPES=${RECIPES:-rotary} W=${W:-/tmp/aotc-lightllm} \
  exec bash "$(dirname "$0")/../run_library.sh" "$(dirname "$0")" "${LIGHTLLM:-.gpu/lightllm}" lightllm
