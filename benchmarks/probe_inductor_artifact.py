"""Probe for the PyTorch-models issue (#5): can an Inductor artifact built ahead of time
serve a transformer layer in a fresh process without compiling, inside a CUDA graph?

Run on the GPU machine from the repository root: ``python benchmarks/probe_inductor_artifact.py``.
For two ways of handing the layer to ``torch._inductor.standalone_compile`` (the lifted
graph of ``torch.export``, parameters as inputs; and ``make_fx``, parameters inside), it
compiles one shape (batch 1, sequence 128, fp16), saves the artifact, then in a fresh
process loads it, counts Triton and Inductor compilations during load and calls, runs it
eagerly and inside a CUDA graph, and compares with eager PyTorch. It prints one JSON line
per variant. Nothing here is part of aotc yet; it records what the mechanism can do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
torch.set_grad_enabled(False)
sys.path.insert(0, sys.argv[3])
from probe_inductor_artifact import Layer, inputs
counts = {"triton_compile": 0, "inductor_codegen": 0}
import triton.compiler.compiler as tc
real_compile = tc.compile
def counted(*a, **k):
    counts["triton_compile"] += 1
    return real_compile(*a, **k)
tc.compile = counted
import torch._inductor.graph as ig
real_codegen = ig.GraphLowering.codegen
def counted_codegen(self, *a, **k):
    counts["inductor_codegen"] += 1
    return real_codegen(self, *a, **k)
ig.GraphLowering.codegen = counted_codegen
model, x = inputs()
args = ([*model.parameters(), *model.buffers(), x] if sys.argv[2] == "lifted" else [x])
t1 = time.perf_counter()
art = torch._inductor.CompiledArtifact.load(path=sys.argv[1], format="binary")
t2 = time.perf_counter()
out = art(*args)
out = out[0] if isinstance(out, (tuple, list)) else out
torch.cuda.synchronize()
t3 = time.perf_counter()
with torch.no_grad():
    ref = model(x)
err = float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    gout = art(*args)
gout = gout[0] if isinstance(gout, (tuple, list)) else gout
g.replay(); torch.cuda.synchronize()
gerr = float((gout.float() - ref.float()).abs().max() / ref.float().abs().max())
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
paths = (("eager", lambda: model(x)), ("artifact", lambda: art(*args)), ("graph", g.replay))
for name, fn in paths:
    with torch.no_grad():
        for _ in range(10): fn()
        torch.cuda.synchronize(); s.record()
        for _ in range(100): fn()
        e.record(); e.synchronize()
    counts[name + "_us"] = s.elapsed_time(e) * 10
print(json.dumps({"import_torch_s": t1 - t0, "load_s": t2 - t1, "first_call_s": t3 - t2,
                  "rel_err": err, "graph_rel_err": gerr, **counts}))
"""


def Layer():  # type: ignore[no-untyped-def]
    """The layer recipes/layer.toml builds (recipes/models/layer.py), at its defaults."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "recipes", "models"))  # fmt: skip
    from layer import make_layer

    return make_layer()


def inputs():  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(0)
    model = Layer().cuda().half().eval()
    x = torch.randn(1, 128, 1024, device="cuda", dtype=torch.half)
    return model, x


def build(variant: str, path: str) -> dict[str, float]:
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    model, x = inputs()
    t0 = time.perf_counter()
    with torch.no_grad():
        if variant == "lifted":
            gm = torch.export.export(model, (x,)).graph_module
            args = [*model.parameters(), *model.buffers(), x]
        else:
            gm = make_fx(model)(x)
            args = [x]
        t1 = time.perf_counter()
        art = torch._inductor.standalone_compile(
            gm, args, dynamic_shapes="from_example_inputs", options={}
        )
    t2 = time.perf_counter()
    art.save(path=path, format="binary")
    return {"trace_s": t1 - t0, "compile_s": t2 - t1, "bytes": os.path.getsize(path)}


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for variant in ("lifted", "make_fx"):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "artifact.bin")
            result: dict[str, object] = {"variant": variant}
            try:
                result.update(build(variant, path))
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "c2"),
                       "TRITON_CACHE_DIR": os.path.join(tmp, "t2")}  # fmt: skip
                proc = subprocess.run(
                    [sys.executable, "-c", CHILD, path, variant, here],
                    capture_output=True, text=True, env=env, timeout=120,
                )  # fmt: skip
                if proc.returncode == 0:
                    result.update(json.loads(proc.stdout.strip().splitlines()[-1]))
                else:
                    result["child_error"] = proc.stderr.strip().splitlines()[-3:]
            except Exception as exc:  # a probe reports, it does not stop
                result["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
