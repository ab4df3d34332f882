"""A stand-in for unsloth_zoo (unsloth's companion package, not installed where the
held-out unsloth kernels are built): only the names unsloth/kernels/utils.py, fp8.py and
device_type.py import at module level. None of them runs in a kernel."""
