#!/usr/bin/env bash
# On a GPU machine: build this folder's recipes against lightllm's kernels (tuned on this
# GPU) and run check.py on each bundle: rotary.toml (its rotary embedding) and decode.toml
# (its GQA flash decoding, two stages).
#   LIGHTLLM=<folder holding lightllm/>: from a checkout, the kernel files, unchanged (they
#   import only torch and triton), with empty package __init__.py files in place of
#   lightllm's (its own imports the whole server):
#     D=<this repository>/.gpu/lightllm; mkdir -p $D; cd <lightllm checkout>
#     git archive HEAD lightllm/models/llama/triton_kernel/{rotary_emb,gqa_flash_decoding_stage1,gqa_flash_decoding_stage2}.py \
#       | tar -x -C $D
#     touch $D/lightllm/{,models/,models/llama/,models/llama/triton_kernel/}__init__.py
#   carried as .gpu/lightllm. RECIPES picks recipes (default: both).
#   device: carry [".whl", ".gpu/lightllm"], command: bash benchmarks/heldout/lightllm/run.sh
RECIPES=${RECIPES:-rotary decode} W=${W:-/tmp/aotc-lightllm} \
  exec bash "$(dirname "$0")/../run_library.sh" "$(dirname "$0")" "${LIGHTLLM:-.gpu/lightllm}" lightllm
