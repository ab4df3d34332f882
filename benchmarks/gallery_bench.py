"""The gallery kernels: each bundle's kernel against the same kernel through Triton's JIT.

Run on a GPU machine from the repository root:

    PYTHONPATH=$PWD python benchmarks/gallery_bench.py --bundles out/gallery --out out/bench
    python benchmarks/gallery_bench.py ... --kernels matmul,moe --skip-cold

``--bundles`` is a folder of ``<recipe>.aotc``, one per ``recipes/gallery/*.toml``; a missing
one is built there first (tuned on this GPU, as ``aotc build`` does). Both parts read each
kernel's calling convention, inputs and sizes from recipes/gallery/reference.py and the
recipes, so nothing about a kernel is restated here.

1. Steady state, at every bucket bound (and listed size) of every kernel, in one dtype (bf16
   where the recipe has it): the bundle's kernel through the loader, against the author's
   own host wrapper with its ``@triton.autotune`` (or heuristics, or launcher table), warm:
   run once first so that it has compiled and tuned (``TRITON_CACHE_AUTOTUNING=1`` keeps
   the tuning on disk between runs, Triton >= 3.4). Both are timed in this process on the
   GPU alone (``gpu_ms``: L2 flushed before every repetition, median, as
   ``triton.testing.do_bench``, but with the GPU held back before each repetition so that
   the host's launch path, the loader's or the JIT's, is never in the time), back to back
   ``--repeats`` times, who goes first alternating; the table gives the median of each and
   JIT / bundle (>= 1: the bundle is as fast or faster), with the range of the repeats' own
   ratios (the run's noise) and whether the bundle launched the machine code the JIT did.
   Work the caller does either way is in both: zeroing an accumulated output; the MoE's
   host alignment is done once beforehand, each path with its own block size. Outputs are
   compared first; a mismatch is flagged "!".
2. Time to first result, each in a fresh Python process, at the smallest bucket: from after
   torch has made the inputs to the first result on the host (synchronised): import,
   open (bundle) and first call; the JIT with an empty ``TRITON_CACHE_DIR`` (it compiles and
   autotunes). JIT / bundle should be >= 20. The loader and the gallery's kernel files are
   compiled to bytecode beforehand, as pip does for an installed package (bytecode_env.py).

Everything goes to ``--out``/gallery_bench.json, rewritten after each part.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bytecode_env import compile_bytecode

os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")  # read by Triton when it tunes

ROOT = Path(__file__).resolve().parents[1]
GALLERY = ROOT / "recipes" / "gallery"
sys.path.insert(0, str(ROOT))
COLD_GOAL = 20.0
HOLD_CYCLES = 200_000  # about 100 us at the H200's clock: more than any host launch path


def gpu_ms(fn: Callable[[], Any], rep_ms: float = 100.0) -> float:
    """Median milliseconds of ``fn``'s GPU work, L2 flushed before every repetition, as
    ``triton.testing.do_bench`` measures. Its events time the GPU from the start event to
    the end event, so when the host is slower to launch ``fn`` than the GPU is to flush L2
    (a few-microsecond kernel behind a Python launch path), the host's latency lands in
    the time (seen: the JIT's tiny kernels at 35 us instead of 5 on one machine). Here a
    sleep kernel holds the GPU back after each flush, so ``fn`` is always queued by the
    time the GPU reaches the start event."""
    import torch
    import triton

    cache = triton.runtime.driver.active.get_empty_cache_for_benchmark()
    fn()
    torch.cuda.synchronize()
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first.record()
    for _ in range(5):
        cache.zero_()
        fn()
    last.record()
    torch.cuda.synchronize()
    n = max(10, min(1000, int(rep_ms / max(first.elapsed_time(last) / 5, 1e-3))))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for start, end in zip(starts, ends, strict=True):
        cache.zero_()
        torch.cuda._sleep(HOLD_CYCLES)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def log(msg: str) -> None:
    print(f"[gallery_bench] {msg}", file=sys.stderr, flush=True)


def load_reference() -> Any:
    """recipes/gallery/reference.py (torch only; kernel files load when a JIT path runs)."""
    sys.path.insert(0, str(GALLERY))
    spec = importlib.util.spec_from_file_location("gallery_reference", GALLERY / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def dtype_of(table: dict[str, Any]) -> str:
    types: list[str] = table["dtypes"]["T"]
    return "bf16" if "bf16" in types else types[0]


def bundle_path(bundles: Path, recipe: Path) -> Path:
    """The recipe's bundle in ``bundles``, built (and tuned here) if it is not there yet."""
    path = bundles / f"{recipe.stem}.aotc"
    if not path.exists():
        from aot.build import build
        from aot.env import Environment

        log(f"building {recipe.name} into {path} (tuning on this GPU)")
        cache = Path(os.environ.get("AOTC_CACHE_DIR", Path.home() / ".cache" / "aotc"))
        env = Environment(cache_dir=cache, jobs=os.cpu_count() or 1, progress=False)
        build(recipe, path, env, ROOT)
    return path


# -- 1. steady state ------------------------------------------------------------------------


def _outputs_match(ref: Any, name: str, args: list[Any], jit_out: dict[str, Any]) -> bool:
    import torch

    params = ref.kernel_params(name)
    for out, theirs in jit_out.items():
        ours = args[params.index(out)].double().reshape(theirs.shape)
        tol = 1e-4 if theirs.dtype == torch.float32 else 2e-2
        scale = float(torch.linalg.norm(theirs.double())) or 1.0
        if not float(torch.linalg.norm(ours - theirs.double())) <= tol * scale:
            return False
    return True


def steady_row(
    ref: Any, bundle: Any, name: str, sizes: dict[str, int], repeats: int
) -> dict[str, Any]:
    import torch

    table = ref.recipe_kernels()[name]
    conv = ref.CONVENTIONS[name]
    dtype = dtype_of(table)
    kernel = bundle[name]
    # Work that depends on the data (the MoE's routing: how many experts' weights a few
    # tokens read) is timed on each of the recipe's `tune.draws` draws, both sides on the
    # same ones, and the draws' times averaged, as the tuner times it.
    draws = int(table.get("tune", {}).get("draws", 1))
    calls = [ref.call_args(name, sizes, {"T": dtype}, kernel.launch_config) for _ in range(draws)]
    args = calls[0]
    keywords = ref.call_keywords(name, sizes, kernel)
    params = ref.kernel_params(name)

    def launcher(call: list[Any]) -> Callable[[], None]:
        def run() -> None:
            for p in conv.fresh:  # allocated at every call, as the author's wrapper does
                i = params.index(p)
                call[i] = torch.empty_like(call[i])
            for p in conv.zeroed:
                call[params.index(p)].zero_()
            kernel(*call, **keywords)

        return run

    each = [conv.jit(c) for c in calls]
    jit_out = each[0]()  # compiles and autotunes (or reads Triton's caches)
    launcher(args)()
    torch.cuda.synchronize()
    match = _outputs_match(ref, name, args, jit_out)
    # Timed writing the same memory: the bundle into the JIT's own output tensors where the
    # JIT keeps them between calls, and into a fresh one at every call where the JIT's
    # wrapper allocates one (then the allocator hands both the same block), so that where
    # each side's output lies (a few percent on a 5 us kernel) is not in the comparison.
    mine = [launcher(_into(c, params, out() if i else jit_out)) for i, (c, out)
            in enumerate(zip(calls, each, strict=True))]  # fmt: skip
    ours_ms: list[float] = []
    theirs_ms: list[float] = []
    for i in range(repeats):  # the two back to back, who goes first alternating
        order = ((mine, ours_ms), (each, theirs_ms))
        for fns, times in order if i % 2 == 0 else reversed(order):
            times.append(statistics.fmean(gpu_ms(f) for f in fns))
    row = {
        "kernel": name,
        "dtype": dtype,
        "sizes": sizes,
        "match": match,
        "bundle_us": statistics.median(ours_ms) * 1e3,
        "jit_us": statistics.median(theirs_ms) * 1e3,
    }
    row["jit_over_bundle"] = row["jit_us"] / row["bundle_us"]
    # Each repeat's own ratio (the two timed back to back): their range is the run's noise.
    row["repeat_ratios"] = [t / o for o, t in zip(ours_ms, theirs_ms, strict=True)]
    row["bundle_config"] = _launch_config(kernel, ref, table, sizes)
    best = getattr(ref.kernel_object(name), "best_config", None)
    row["jit_config"] = str(best) if best is not None else "host launcher"
    row["same_code"] = _same_code(kernel, args, keywords, ref.kernel_object(name), each[0])
    return row


def _into(call: list[Any], params: list[str], outputs: dict[str, Any]) -> list[Any]:
    """``call`` with each output replaced by the JIT's tensor of the same shape and strides
    (the call's scalar strides stay true); an output the JIT gave otherwise stays."""
    call = list(call)
    for name, tensor in outputs.items():
        i = params.index(name)
        if tensor.shape == call[i].shape and tensor.stride() == call[i].stride():
            call[i] = tensor
    return call


def _same_code(kernel: Any, args: list[Any], keywords: dict[str, Any], jit: Any,
               theirs: Any) -> bool | None:  # fmt: skip
    """Whether the variant the bundle launches for this call is the machine code the JIT
    launches for it (the cubins' code, byte for byte): then the two run the same
    instructions, and their times can differ only by the host's launch path and the GPU's
    noise. The JIT's kernel is the one its launch hook sees ``theirs()`` launch (after
    autotuning, the chosen config's). None where it cannot tell."""
    from loader.cubin import machine_code

    try:
        variant = kernel.host_path(*args, **keywords).variant  # launches once more
        ours = machine_code(kernel.source.read_entry(variant.entry))
        launched = _jit_launched(theirs)
        while not hasattr(jit, "device_caches") and hasattr(jit, "fn"):
            jit = jit.fn  # through @triton.autotune and @triton.heuristics
        found = [machine_code(k.asm["cubin"]) for cache in jit.device_caches.values()
                 for k in cache[0].values() if k.function in launched]  # fmt: skip
    except Exception:  # informative only
        return None
    if len(found) != 1:
        return None
    return ours == found[0]


def _jit_launched(run: Any) -> set[int]:
    """The CUDA functions Triton's JIT launches in ``run()``, seen by its launch hook."""
    import torch
    from triton import knobs

    seen: set[int] = set()

    def hook(metadata: Any) -> None:
        seen.add(metadata.get()["function"])

    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add") and hasattr(chain, "remove"):  # a chain of hooks (Triton 3.5+)
        chain.add(hook)
        undo = lambda: chain.remove(hook)  # noqa: E731
    else:
        knobs.runtime.launch_enter_hook = hook
        undo = lambda: setattr(knobs.runtime, "launch_enter_hook", chain)  # noqa: E731
    try:
        run()
        torch.cuda.synchronize()
    finally:
        undo()
    return seen


def _launch_config(kernel: Any, ref: Any, table: dict[str, Any], sizes: dict[str, int]) -> str:
    try:
        values = ref.launch_values(table, sizes)
        return str(dict(kernel.launch_config(dtypes={"T": dtype_of(table)}, **values)))
    except Exception as exc:  # informative only
        return f"? ({type(exc).__name__})"


def steady_state(
    ref: Any, names: list[str], bundles: Path, repeats: int, out: dict[str, Any], save: Any
) -> None:
    import loader

    tables = ref.recipe_kernels()
    opened: dict[Path, Any] = {}
    rows: list[dict[str, Any]] = out.setdefault("steady_state", [])
    for name in names:
        recipe = tables[name]["recipe"]
        if recipe not in opened:
            opened[recipe] = loader.open(bundle_path(bundles, recipe))
        for sizes in ref.bucket_points(tables[name]):
            try:
                row = steady_row(ref, opened[recipe], name, sizes, repeats)
            except Exception as exc:
                log(f"{name} {sizes}: {type(exc).__name__}: {exc}")
                row = {"kernel": name, "sizes": sizes, "error": f"{type(exc).__name__}: {exc}"}
            rows.append(row)
            log(_steady_line(row))
            save()
    for b in opened.values():
        b.close()


def _sizes_text(sizes: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items())


def _steady_line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['kernel']:<14}{_sizes_text(r['sizes']):<44}error: {r['error'][:60]}"
    flag = "" if r["match"] else " !"
    same = {True: "yes", False: "no", None: "?"}[r.get("same_code")]
    each = r.get("repeat_ratios") or [r["jit_over_bundle"]]
    spread = f"{min(each):.2f}-{max(each):.2f}"
    return (
        f"{r['kernel']:<14}{_sizes_text(r['sizes']):<44}{r['bundle_us']:>10.1f}"
        f"{r['jit_us']:>10.1f}{r['jit_over_bundle']:>9.2f}x{spread:>12}{same:>11}{flag}"
    )


# -- 2. time to first result in a fresh process ------------------------------------------------


def child(args: argparse.Namespace) -> None:
    """One fresh process: inputs first (not timed), then import, open and first call."""
    t_start = time.perf_counter()
    import torch

    ref = load_reference()
    name, sizes = args.kernel, json.loads(args.sizes)
    conv = ref.CONVENTIONS[name]
    dtypes = {"T": args.dtype}
    # For the MoE, any block size: each path realigns for its own config, timed. The
    # router's output (top-k expert ids) is what a service has before the call: recovered
    # from the inputs here, untimed, and given to both paths alike.
    config = {"BLOCK_SIZE_M": 16} if conv.realign is not None else None
    call = list(getattr(ref, f"{name}_inputs")(sizes, dtypes, config=config))
    routed = {"topk_ids": ref.moe_routing(call)[0]} if conv.realign is not None else {}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if args.child == "bundle":
        import loader

        t_import = time.perf_counter()
        kernel = loader.open(args.bundle)[name]
        t_open = time.perf_counter()
        if conv.realign is not None:
            values = ref.launch_values(ref.recipe_kernels()[name], sizes)
            call = conv.realign(call, kernel.launch_config(**values), **routed)
        kernel(*call, **ref.call_keywords(name, sizes, kernel))
    else:
        run = conv.jit(call, **routed)  # imports triton and the kernel file; the MoE aligns
        t_import = t_open = time.perf_counter()
        run()
    torch.cuda.synchronize()
    t_end = time.perf_counter()
    print(
        "RESULT "
        + json.dumps(
            {
                "setup_s": t0 - t_start,
                "import_s": t_import - t0,
                "open_s": t_open - t_import,
                "first_call_s": t_end - t_open,
                "total_s": t_end - t0,
            }
        )
    )


def run_child(
    mode: str, name: str, sizes: dict[str, int], dtype: str, bundle: Path
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gallery-triton-cache-") as cache:
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
        env = {**os.environ, "TRITON_CACHE_DIR": cache, "PYTHONPATH": path}
        env.pop("TRITON_CACHE_AUTOTUNING", None)
        cmd = [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--kernel",
            name,
            "--sizes",
            json.dumps(sizes),
            "--dtype",
            dtype,
            "--bundle",
            str(bundle),
        ]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        return {"error": (proc.stderr or proc.stdout)[-800:]}
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


def cold_start(ref: Any, names: list[str], bundles: Path, out: dict[str, Any], save: Any) -> None:
    tables = ref.recipe_kernels()
    compile_bytecode(ROOT / "loader", GALLERY)  # as installed: see bytecode_env.py
    rows: list[dict[str, Any]] = out.setdefault("first_result", [])
    for name in names:
        table = tables[name]
        sizes = ref.bucket_points(table)[0]
        path = bundle_path(bundles, table["recipe"])
        row: dict[str, Any] = {"kernel": name, "sizes": sizes, "dtype": dtype_of(table)}
        for mode in ("bundle", "jit"):
            log(f"fresh process: {name} {mode}")
            row[mode] = run_child(mode, name, sizes, row["dtype"], path)
        if "total_s" in row["bundle"] and "total_s" in row["jit"]:
            row["jit_over_bundle"] = row["jit"]["total_s"] / row["bundle"]["total_s"]
        rows.append(row)
        save()


# -- tables and main ----------------------------------------------------------------------------


def print_tables(out: dict[str, Any]) -> None:
    rows = out.get("steady_state", [])
    if rows:
        print(
            "\nSteady state: bundle vs the kernel's own Triton JIT (autotune/heuristics/table), "
            "µs, median of do_bench medians"
        )
        print(f"{'kernel':<14}{'sizes':<44}{'bundle':>10}{'JIT':>10}{'JIT/bundle':>10}"
              f"{'repeats':>12}{'same code':>11}")  # fmt: skip
        for r in rows:
            print(_steady_line(r))
        ratios = [r["jit_over_bundle"] for r in rows if "jit_over_bundle" in r]
        if ratios:
            below = [r for r in rows if r.get("jit_over_bundle", 1.0) < 1.0]
            same = sum(1 for r in below if r.get("same_code"))
            ahead = sum(1 for r in below if max(r.get("repeat_ratios") or [0.0]) >= 1.0)
            print(
                f"{len(ratios)} buckets: JIT/bundle {min(ratios):.2f}x..{max(ratios):.2f}x, "
                f"geomean {statistics.geometric_mean(ratios):.2f}x, {len(below)} below 1.0x "
                f"({same} of them running the JIT's own machine code; at {ahead} of them "
                "the bundle was ahead in at least one repeat)"
            )
    rows = out.get("first_result", [])
    if rows:
        print("\nTime to first result in a fresh process (s): import + open + first call")
        print(f"{'kernel':<14}{'sizes':<30}{'bundle':>9}{'JIT (cold)':>12}{'JIT/bundle':>12}")
        for r in rows:
            b, j = r["bundle"].get("total_s"), r["jit"].get("total_s")
            bt = f"{b:.3f}" if b is not None else "error"
            jt = f"{j:.2f}" if j is not None else "error"
            ratio = r.get("jit_over_bundle")
            rt = f"{ratio:.0f}x" + ("" if ratio >= COLD_GOAL else " (<20x)") if ratio else "-"
            print(f"{r['kernel']:<14}{_sizes_text(r['sizes']):<30}{bt:>9}{jt:>12}{rt:>12}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundles", type=Path, default=ROOT / "artifacts" / "gallery")
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts" / "gallery-bench")
    ap.add_argument("--kernels", help="comma-separated recipe kernel names (default: all)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-steady", action="store_true")
    ap.add_argument("--skip-cold", action="store_true")
    ap.add_argument("--child", choices=["bundle", "jit"], help=argparse.SUPPRESS)
    ap.add_argument("--kernel", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", help=argparse.SUPPRESS)
    ap.add_argument("--bundle", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return

    ref = load_reference()
    every = sorted(ref.recipe_kernels())
    names = every if not args.kernels else [n.strip() for n in args.kernels.split(",")]
    unknown = sorted(set(names) - set(every))
    if unknown:
        ap.error(f"unknown kernels {unknown}; the gallery has {', '.join(every)}")
    args.bundles.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"kernels": names}
    path = args.out / "gallery_bench.json"

    def save() -> None:
        path.write_text(json.dumps(out, indent=1, default=str))

    if not args.skip_steady:
        steady_state(ref, names, args.bundles, args.repeats, out, save)
    if not args.skip_cold:
        cold_start(ref, names, args.bundles, out, save)
    save()
    print_tables(out)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
