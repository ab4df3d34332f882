"""A stand-in for einops (not installed where the held-out mamba kernels are built): only
the names mamba_ssm/ops/triton/selective_state_update.py imports at module level, used by
its PyTorch reference, never by a kernel."""


def rearrange(*args, **kwargs):  # type: ignore[no-untyped-def]
    raise NotImplementedError("einops stand-in")


repeat = rearrange
