def torch_compile(fn=None, **kwargs):
    """unsloth_zoo's torch.compile decorator, here a no-op (fp8.py decorates host code)."""
    return fn if fn is not None else (lambda f: f)
