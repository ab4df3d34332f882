"""Probe: does AOTInductor load on this machine, and how fast? (issue 5, the other mechanism)

    python benchmarks/probe_aoti.py                       # the layer, on the GPU, 1x128
    python benchmarks/probe_aoti.py --mode max-autotune --buckets 1x128 4x128
    python benchmarks/probe_aoti.py --device cpu --small  # the flow on a CPU (a check)
    python benchmarks/probe_aoti.py --small --gdb         # a crash's native backtrace

An earlier session saw ``aoti_load_package`` segfault on the GPU image (torch 2.11). This
compiles the recipes/layer.toml module with ``torch._inductor.aoti_compile_and_package``
per bucket, without the weights in the package (``aot_inductor.package_constants_in_so``
off: the weights are bound at load from the module, as model mode does). Then it loads
each package in fresh processes run with ``-X faulthandler``, by two routes: the public
``aoti_load_package``, and ``torch._C._aoti.AOTIModelPackageLoader`` directly, which skips
``load_pt2``. For each route it prints one JSON line: the exit code (and stderr's tail on a
crash), the import and load times, the error against eager, and, on CUDA, the replay time
of a CUDA graph of the loaded model. The loading process never imports torch._dynamo
itself; the JSON says whether it was imported anyway.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "recipes" / "models"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_bench import shape_arg  # noqa: E402  "BxT" on the command line

CHILD = r"""
import ctypes, json, os, sys, time
t0 = time.perf_counter()
import torch
for lib in filter(None, os.environ.get("AOTI_PROBE_PRELOAD", "").split(":")):
    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)  # a hypothesis test: these libraries first
t_torch = time.perf_counter() - t0
sys.path.insert(0, sys.argv[1])
from layer import make_layer
path, route, device = sys.argv[2:5]
kw, shape = json.loads(sys.argv[5]), json.loads(sys.argv[6])
dtype = torch.half if device == "cuda" else torch.float
torch.manual_seed(0)
m = make_layer(**kw).to(device=device, dtype=dtype).eval()
t1 = time.perf_counter()
if route == "aoti_load_package":
    compiled = torch._inductor.aoti_load_package(path)
else:
    from torch.export.pt2_archive._package import AOTICompiledModel
    compiled = AOTICompiledModel(torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, -1))
t_load = time.perf_counter() - t1
named = {**dict(m.named_parameters()), **dict(m.named_buffers())}
fqns = compiled.get_constant_fqns()
t2 = time.perf_counter()
compiled.load_constants({k: named[k] for k in fqns}, check_full_update=True, user_managed=True)
t_bind = time.perf_counter() - t2
x = torch.randn(*shape, kw["d_model"], device=device, dtype=dtype)
t3 = time.perf_counter()
with torch.no_grad():
    y = compiled(x)
    y = y[0] if isinstance(y, (list, tuple)) else y
    ref = m(x)
if device == "cuda":
    torch.cuda.synchronize()
t_first = time.perf_counter() - t3
err = float((y.float() - ref.float()).abs().max() / ref.float().abs().max())
out = {"route": route, "import_torch_s": t_torch, "load_s": t_load, "bind_s": t_bind,
       "first_call_s": t_first, "ready_s": time.perf_counter() - t0, "rel_err": err,
       "constants": len(fqns), "dynamo_imported": "torch._dynamo" in sys.modules}
if device == "cuda":
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        compiled(x)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g), torch.no_grad():
        compiled(x)
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(100):
        g.replay()
    b.record()
    b.synchronize()
    out["graph_replay_us"] = a.elapsed_time(b) * 10
print(json.dumps(out))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--mode", default="default", choices=("default", "max-autotune"))
    p.add_argument("--buckets", type=shape_arg, nargs="+", default=[(1, 128)], metavar="BxT")
    p.add_argument("--small", action="store_true", help="d_model 64: a quick check")
    p.add_argument("--out", type=Path, help="keep the packages here (default: a temp dir)")
    p.add_argument("--gdb", action="store_true", help="also load under cuda-gdb: a backtrace")
    p.add_argument("--cxx", help="the C++ compiler AOTInductor uses (Inductor's cpp.cxx)")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an Inductor setting for the compile (a Python literal value)",
    )
    p.add_argument(
        "--time-cxx",
        action="store_true",
        help="print each C++ compiler command's duration (where the time goes)",
    )
    p.add_argument("--load", type=Path, help="a package built earlier: load it, compile nothing")
    args = p.parse_args()

    import torch

    sys.path.insert(0, str(MODELS))
    from layer import make_layer

    kw = {"d_model": 64, "heads": 4, "ffn": 128} if args.small else {}
    kw = {"d_model": 1024, "heads": 16, "ffn": 4096, **kw}
    dtype = torch.half if args.device == "cuda" else torch.float
    torch.manual_seed(0)
    m = make_layer(**kw).to(device=args.device, dtype=dtype).eval()
    configs: dict[str, object] = {"aot_inductor.package_constants_in_so": False}
    if args.cxx:
        configs["cpp.cxx"] = args.cxx
    for item in args.option:
        key, _, value = item.partition("=")
        configs[key] = ast.literal_eval(value)
    if args.time_cxx:
        _time_compiler_commands()
    if args.mode == "max-autotune":
        configs.update({"max_autotune": True, "coordinate_descent_tuning": True,
                        "max_autotune_prune_choices_based_on_shared_mem": True})  # fmt: skip
    work = args.out or Path(tempfile.mkdtemp(prefix="aoti-probe-"))
    work.mkdir(parents=True, exist_ok=True)
    for b, t in args.buckets:
        x = torch.randn(b, t, kw["d_model"], device=args.device, dtype=dtype)
        if args.load:
            path = str(args.load)
        else:
            t0 = time.perf_counter()
            with torch.no_grad():
                ep = torch.export.export(m, (x,))
                path = torch._inductor.aoti_compile_and_package(
                    ep, package_path=str(work / f"layer-{b}x{t}.pt2"), inductor_configs=configs
                )
            row = {"bucket": f"{b}x{t}", "mode": args.mode, "package_bytes": os.path.getsize(path),
                   "compile_s": time.perf_counter() - t0}  # fmt: skip
            print(json.dumps(row), flush=True)
        for route in ("aoti_load_package", "AOTIModelPackageLoader"):
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="ind-")}
            argv = [str(MODELS), path, route, args.device, json.dumps(kw), json.dumps([b, t])]
            proc = subprocess.run(
                [sys.executable, "-X", "faulthandler", "-c", CHILD, *argv],
                capture_output=True, text=True, env=env, timeout=600,
            )  # fmt: skip
            if proc.returncode == 0:
                print(proc.stdout.strip().splitlines()[-1], flush=True)
            else:
                print(json.dumps({"route": route, "rc": proc.returncode,
                                  "stderr": proc.stderr[-3000:]}), flush=True)  # fmt: skip
            if args.gdb and route == "AOTIModelPackageLoader":
                _backtrace([sys.executable, "-c", CHILD, *argv], env)


def _time_compiler_commands() -> None:
    """Wrap Inductor's C++ compiler runner: one JSON line per command, with its seconds."""
    from torch._inductor import cpp_builder

    real = cpp_builder.run_compile_cmd

    def timed(cmd_line: str, cwd: str) -> None:
        t = time.perf_counter()
        try:
            real(cmd_line, cwd)
        finally:
            words = cmd_line.split()
            out = words[words.index("-o") + 1] if "-o" in words else ""
            print(json.dumps({"cxx_s": round(time.perf_counter() - t, 2), "output": out,
                              "compile_only": " -c " in cmd_line}), flush=True)  # fmt: skip

    cpp_builder.run_compile_cmd = timed


def _backtrace(cmd: list[str], env: dict[str, str]) -> None:
    """Run ``cmd`` under cuda-gdb in batch mode; print the backtrace of every thread and
    the shared libraries loaded (the machine has no gdb; cuda-gdb also debugs host code)."""
    steps = ["set pagination off", "run", "bt 40", "info registers rip", "x/8i $pc - 16"]
    gdb = ["cuda-gdb", "-batch", *[a for s in steps for a in ("-ex", s)], "--args", *cmd]
    proc = subprocess.run(gdb, capture_output=True, text=True, env=env, timeout=600)
    text = proc.stdout[max(0, proc.stdout.find("received signal")) :]
    print(json.dumps({"gdb_rc": proc.returncode, "stdout": text[:16000],
                      "stderr": proc.stderr[-2000:]}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
