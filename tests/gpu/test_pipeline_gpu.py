"""The Llama MLP pipeline (recipes/mlp.toml) on a real GPU: one CUDA graph per bucket,
against the same kernels called one by one and against PyTorch, at every bucket and
between buckets, and from several threads on their own streams at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "recipes" / "mlp.toml"
H, INTER, EPS = 4096, 14336, 1e-5
BOUNDS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
BETWEEN = [3, 5, 13, 33, 100, 300, 700, 1500, 3000]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def mlp_bundle(given_or_built: Callable[..., Path]) -> Path:
    """The MLP bundle: AOTC_TEST_MLP_BUNDLE if given (a tuned build), else built here
    without tuning."""
    from aot.build import TuneOptions

    return given_or_built(MLP, "AOTC_TEST_MLP_BUNDLE", tune=TuneOptions(enabled=False))


@pytest.fixture(scope="module")
def setup(mlp_bundle: Path) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    import torch

    import loader

    torch.manual_seed(0)
    dev, bf16 = "cuda", torch.bfloat16
    weights = {
        "w_norm": torch.rand(H, device=dev, dtype=bf16) + 0.5,
        "w_gate_up": torch.randn(H, 2 * INTER, device=dev, dtype=bf16) / H**0.5,
        "w_down": torch.randn(INTER, H, device=dev, dtype=bf16) / INTER**0.5,
    }
    b = loader.open(mlp_bundle)
    yield b, b.pipeline("mlp", **weights), weights
    b.close()


def steps(b: Any, x: Any, w: dict[str, Any]) -> Any:
    """The pipeline's kernels called one by one through the loader, on x's own size."""
    m = x.shape[0]
    h, out = x.new_empty(m, H), x.new_empty(m, H)
    gu, act = x.new_empty(m, 2 * INTER), x.new_empty(m, INTER)
    b["rmsnorm"](x, w["w_norm"], h, m, H, H, H, EPS)
    b["gate_up"](h, w["w_gate_up"], gu, m, 2 * INTER, H, H, 1, 2 * INTER, 1, 2 * INTER, 1)
    b["silu_mul"](gu, act, m, INTER, 2 * INTER, INTER)
    b["down"](act, w["w_down"], x, out, m, H, INTER, INTER, 1, H, 1, H, 1)
    return out


def torch_mlp(x: Any, w: dict[str, Any]) -> Any:
    import torch.nn.functional as F

    x32 = x.float()
    h = F.rms_norm(x32, (H,), w["w_norm"].float(), EPS)
    g, u = (h @ w["w_gate_up"].float()).split(INTER, dim=-1)
    return (F.silu(g) * u) @ w["w_down"].float() + x32


def rel_error(a: Any, ref: Any) -> float:
    return float((a.float() - ref).abs().max() / ref.abs().max())


@pytest.mark.parametrize("m", sorted(BOUNDS + BETWEEN))
def test_mlp_pipeline_equals_steps_and_torch(setup: Any, m: int) -> None:
    import torch

    b, mlp, w = setup
    x = torch.randn(m, H, device="cuda", dtype=torch.bfloat16)
    out = mlp(x)
    assert out.shape == (m, H) and out.dtype == torch.bfloat16
    ref = steps(b, x, w)
    torch.cuda.synchronize()
    # Same variants, same rows: padding the call up to its bucket changes no bit.
    assert torch.equal(out, ref), (out.float() - ref.float()).abs().max()
    assert rel_error(out, torch_mlp(x, w)) < 2e-2
    given = torch.empty_like(x)
    assert mlp(x, given) is given and torch.equal(given, out)


def test_every_bucket_has_its_graph(setup: Any) -> None:
    _, mlp, _ = setup
    assert mlp.warmup() == len(BOUNDS)
    assert [c["M"] for c in mlp.captured] == BOUNDS


def test_threads_on_their_own_streams(setup: Any, in_threads: Any) -> None:
    import torch

    b, mlp, w = setup
    sizes = [1, 3, 16, 16, 64, 200, 1000]
    xs = [torch.randn(m, H, device="cuda", dtype=torch.bfloat16) for m in sizes]
    want = [steps(b, x, w) for x in xs]
    torch.cuda.synchronize()
    errors: list[str] = []

    def work(k: int) -> None:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for i in range(30):
                j = (k + i) % len(xs)
                got = mlp(xs[j]) if i % 2 else steps(b, xs[j], w)
                stream.synchronize()
                if not torch.equal(got, want[j]):
                    errors.append(f"thread {k} call {i} (M={sizes[j]}): wrong result")

    in_threads(4, work)
    assert not errors, errors[:5]


def test_exact_sizes_bind_the_callers_tensors(setup: Any) -> None:
    """At a bucket's own size the graph reads and writes the caller's tensors (no copies);
    the same tensors again change nothing; other tensors, padded calls and misaligned
    views switch back and forth, and every result stays right."""
    import torch

    b, mlp, w = setup
    x, out = torch.randn(16, H, device="cuda", dtype=torch.bfloat16), None
    out = torch.empty_like(x)
    want = steps(b, x, w)
    for _ in range(3):
        out.zero_()
        assert torch.equal(mlp(x, out), want)
    assert all(mlp.binds.values()), mlp.binds  # the driver let us map every graph's nodes
    x2 = torch.randn(16, H, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(mlp(x2), steps(b, x2, w))
    x3 = torch.randn(13, H, device="cuda", dtype=torch.bfloat16)  # padded to 16: copies
    assert torch.equal(mlp(x3), steps(b, x3, w))
    assert torch.equal(mlp(x, out), want)
    raw = torch.randn(16 * H + 1, device="cuda", dtype=torch.bfloat16)
    view = raw[1:].view(16, H)  # 2 bytes past an aligned address
    assert view.data_ptr() % 16 == 2
    assert rel_error(mlp(view), torch_mlp(view, w)) < 2e-2
    torch.cuda.synchronize()
