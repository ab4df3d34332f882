"""A stand-in for transformers (not installed where the held-out unsloth kernels are
built): only what unsloth/kernels/rms_layernorm.py imports at module level."""
