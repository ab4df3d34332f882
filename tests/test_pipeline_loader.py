"""Pipelines in the loader, against the fake driver: capture once per bucket, copy in, replay,
copy out, padding and slicing, weights bound in place, streams ordered by events, threads,
teardown, and the errors a caller can make. The fake driver keeps device memory in host
memory and runs a Python emulation of the handmade ``scale`` kernel (out = x * scale), so
these tests check the numbers, not only the calls. tests/gpu runs the same on an H200."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loader
from tests import handmade
from tests.fakecuda import FakeLib

WORD = 0xFFFFFFFF


def emulate_scale(words: list[int]) -> None:
    """The generic variant of handmade's scale kernel: x_ptr, out_ptr, M, N, stride, scale."""
    x, out, m, n, stride = words[0], words[1], words[2] & WORD, words[3] & WORD, words[4] & WORD
    factor = struct.unpack("<f", struct.pack("<I", words[5] & WORD))[0]
    for row in range(m):
        src = struct.unpack(f"<{n}e", ctypes.string_at(x + row * stride * 2, n * 2))
        data = struct.pack(f"<{n}e", *(v * factor for v in src))
        ctypes.memmove(out + row * stride * 2, data, n * 2)


class HostTensor:
    """A contiguous fp16 tensor in host memory, duck-typed like a torch CUDA tensor."""

    def __init__(self, rows: int, cols: int = 64, fill: float | None = None):
        self.shape = (rows, cols)
        self.dtype = "torch.float16"
        self.is_cuda = True
        self.contiguous = True
        self.buf = ctypes.create_string_buffer(max(rows * cols * 2, 2))
        if fill is not None:
            self.set([[fill + r + c / 64 for c in range(cols)] for r in range(rows)])

    def data_ptr(self) -> int:
        return ctypes.addressof(self.buf)

    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    def is_contiguous(self) -> bool:
        return self.contiguous

    def set(self, rows: list[list[float]]) -> None:
        flat = [v for r in rows for v in r]
        struct.pack_into(f"<{len(flat)}e", self.buf, 0, *flat)

    def rows(self) -> list[list[float]]:
        n = self.shape[1]
        flat = struct.unpack_from(f"<{self.numel()}e", self.buf, 0)
        return [list(flat[i * n : (i + 1) * n]) for i in range(self.shape[0])]


@pytest.fixture
def fake(fake: FakeLib) -> FakeLib:
    """The conftest's fake driver, running the scale kernel on the CPU."""
    fake.emulators["scale_kernel"] = emulate_scale
    return fake


@pytest.fixture
def bundle(fake: FakeLib, tmp_path: Path) -> Iterator[loader.Bundle]:
    b = loader.open(handmade.write(tmp_path / "h.aotc"))
    yield b
    b.close()


def expect(x: HostTensor, factor: float) -> list[list[float]]:
    def f16(v: float) -> float:
        return float(struct.unpack("<e", struct.pack("<e", v))[0])

    return [[f16(f16(v) * factor) for v in r] for r in x.rows()]


@pytest.mark.parametrize("m", [1, 2, 9, 16, 17, 200, 256])
def test_pipeline_equals_its_steps_at_and_between_buckets(
    bundle: loader.Bundle, fake: FakeLib, m: int
) -> None:
    twice = bundle.pipeline("twice")
    x = HostTensor(m, fill=0.5)
    out = HostTensor(m)
    assert twice(x, out) is out
    # The same kernels called one by one, eagerly, on the call's own size.
    tmp, ref = HostTensor(m), HostTensor(m)
    scale = bundle["scale"]
    scale(x, tmp, m, 64, 64, 2.0)
    scale(tmp, ref, m, 64, 64, 3.0)
    assert out.rows() == ref.rows() == expect(HostTensor(m, fill=0.5), 6.0)
    # The graph ran at the bucket's size: M is the bucket's upper bound, not m.
    replayed = [launch for launch in fake.launches if launch.replayed]
    bound = next(b for b in handmade.BUCKETS if b >= m)
    assert [launch.params[2] & WORD for launch in replayed] == [bound, bound]


def test_one_capture_per_bucket_then_replays(bundle: loader.Bundle, fake: FakeLib) -> None:
    twice = bundle.pipeline("twice")
    for m in (3, 9, 16, 5):  # all in the bucket M <= 16
        twice(HostTensor(m, fill=1.0), HostTensor(m))
    assert len(fake.execs) == 1 and twice.captured == [{"M": 16}]
    graphs = [op for op in fake.ops if op[0] == "graph"]
    assert len(graphs) == 4
    assert sum(launch.replayed for launch in fake.launches) == 8
    assert not any(not launch.replayed for launch in fake.launches)  # nothing launched eagerly
    twice(HostTensor(100, fill=1.0), HostTensor(100))
    assert twice.captured == [{"M": 16}, {"M": 256}] and len(fake.execs) == 2


def test_call_copies_in_replays_and_copies_the_rows_out(
    bundle: loader.Bundle, fake: FakeLib
) -> None:
    twice = bundle.pipeline("twice")
    twice.warmup(M=[7])  # M=7 pads up to the bucket of 16
    fake.ops.clear()
    x, out = HostTensor(7, fill=1.0), HostTensor(7)
    twice(x, out, stream=0x77)
    kinds = [op[0] for op in fake.ops if op[0] != "launch"]
    assert kinds == ["wait", "copy", "graph", "copy", "record"]
    copy_in = fake.ops[1]
    assert copy_in[2] == x.data_ptr() and copy_in[3] == 7 * 64 * 2 and copy_in[4] == 0x77
    copy_out = [op for op in fake.ops if op[0] == "copy"][-1]
    assert copy_out[1] == out.data_ptr() and copy_out[3] == 7 * 64 * 2
    # The same stream again: no wait, its own order suffices.
    fake.ops.clear()
    twice(x, out, stream=0x77)
    assert [op[0] for op in fake.ops if op[0] != "launch"] == ["copy", "graph", "copy", "record"]


def test_another_stream_waits_for_the_buckets_last_use(
    bundle: loader.Bundle, fake: FakeLib
) -> None:
    twice = bundle.pipeline("twice")
    x, out = HostTensor(4, fill=1.0), HostTensor(4)
    twice(x, out, stream=0x11)
    record = [op for op in fake.ops if op[0] == "record"][-1]
    fake.ops.clear()
    twice(x, out, stream=0x22)
    assert fake.ops[0] == ("wait", 0x22, record[1])


def test_warmup_all_or_chosen_buckets(bundle: loader.Bundle, fake: FakeLib) -> None:
    twice = bundle.pipeline("twice")
    assert twice.warmup(M=[1, 200]) == 2
    assert twice.captured == [{"M": 1}, {"M": 256}]
    assert twice.warmup() == 3
    assert twice.memory == sum(-(-b * 64 * 2 // 256) * 256 * 3 for b in handmade.BUCKETS)
    with pytest.raises(loader.ArgumentError, match=r"warmup\(\): 'N' is not a dimension"):
        twice.warmup(N=[1])
    with pytest.raises(loader.ArgumentError, match=r"M=257 is outside the buckets \(1..256\)"):
        twice.warmup(M=[257])


def test_weights_are_bound_once_and_read_in_place(bundle: loader.Bundle, fake: FakeLib) -> None:
    w = HostTensor(16, fill=2.0)
    biased = bundle.pipeline("biased", w=w)
    x = HostTensor(3, fill=1.0)
    wt, out = biased(x, HostTensor(16), HostTensor(3))
    assert wt.rows() == expect(w, 2.0) and out.rows() == expect(x, 5.0)
    step0 = next(launch for launch in fake.launches if launch.replayed)
    assert step0.params[0] == w.data_ptr()  # the graph reads the caller's weight itself
    w.set([[1.0] * 64] * 16)
    wt2, _ = biased(x, HostTensor(16), HostTensor(3))
    assert wt2.rows() == [[2.0] * 64] * 16


def test_state_is_bound_once_written_in_place_and_kept_across_calls(
    bundle: loader.Bundle, fake: FakeLib
) -> None:
    kv = HostTensor(256, fill=0.0)
    stateful = bundle.pipeline("stateful", kv=kv)
    for fill in (1.0, 4.0):  # each call writes the state, then reads what it wrote
        x = HostTensor(9, fill=fill)
        out = stateful(x, HostTensor(9))
        assert kv.rows()[:9] == expect(x, 2.0)  # the caller's tensor, written in place
        assert out.rows() == expect(HostTensor(9, fill=fill), 6.0)
    assert len(fake.execs) == 1  # one graph, replayed: the state's address is baked in
    with pytest.raises(loader.ArgumentError, match="needs its weights and state bound: pass kv="):
        bundle.pipeline("stateful")


@pytest.mark.parametrize(
    "weights, message",
    [
        ({}, "needs its weights bound: pass w=<tensor [16, 64] fp16>"),
        ({"w": None, "v": None}, "has no weight 'v'; its weights are: w"),
        ({"w": HostTensor(8)}, "weight 'w' has shape [8, 64]; expected [16, 64]"),
    ],
)
def test_weight_errors(bundle: loader.Bundle, weights: dict[str, object], message: str) -> None:
    with pytest.raises(loader.ArgumentError, match=message.replace("[", r"\[")):
        bundle.pipeline("biased", **weights)


def test_call_errors(bundle: loader.Bundle, fake: FakeLib) -> None:
    twice = bundle.pipeline("twice")
    with pytest.raises(loader.ArgumentError, match=r"M=257 is outside the buckets \(1..256\)"):
        twice(HostTensor(257), HostTensor(257))
    with pytest.raises(loader.ArgumentError, match=r"'x' has shape \[4, 32\]; expected \[M, 64\]"):
        twice(HostTensor(4, 32), HostTensor(4))
    with pytest.raises(loader.ArgumentError, match=r"output 'out' has 5 rows; expected 4"):
        twice(HostTensor(4), HostTensor(5))
    bf16 = HostTensor(4)
    bf16.dtype = "torch.bfloat16"
    with pytest.raises(loader.ArgumentError, match="'x' has element type bf16, expected fp16"):
        twice(bf16, HostTensor(4))
    strided = HostTensor(4)
    strided.contiguous = False
    with pytest.raises(loader.ArgumentError, match="'x' must be contiguous"):
        twice(strided, HostTensor(4))
    with pytest.raises(loader.ArgumentError, match="missing input 'x'"):
        twice(out=HostTensor(4))
    with pytest.raises(loader.ArgumentError, match="no input or output 'y'"):
        twice(HostTensor(4), y=HostTensor(4))
    with pytest.raises(loader.ArgumentError, match="'x' given twice"):
        twice(HostTensor(4), x=HostTensor(4))
    with pytest.raises(loader.ArgumentError, match="pass the outputs"):
        twice(HostTensor(4))  # no torch tensors: outputs cannot be allocated here
    with pytest.raises(KeyError, match=r"no pipeline 'thrice'.*it has: twice, biased"):
        bundle.pipeline("thrice")
    assert not fake.execs  # no error left a graph behind


def test_an_empty_batch_runs_nothing(bundle: loader.Bundle, fake: FakeLib) -> None:
    out = HostTensor(0)
    assert bundle.pipeline("twice")(HostTensor(0), out) is out
    assert not fake.launches and not fake.execs


def test_a_failed_capture_frees_its_buffers_and_leaves_no_capture(
    bundle: loader.Bundle, fake: FakeLib
) -> None:
    twice = bundle.pipeline("twice")
    twice.warmup(M=[1])
    held, graphs = set(fake.memory), set(fake.graphs)
    fake.fail_launch = 700
    with pytest.raises(loader.CudaError, match="ILLEGAL_ADDRESS"):
        twice(HostTensor(4), HostTensor(4))
    assert set(fake.memory) == held and not fake.capturing and set(fake.graphs) == graphs
    fake.fail_launch = 0
    x, out = HostTensor(4, fill=1.0), HostTensor(4)
    twice(x, out)
    assert out.rows() == expect(expect_input(x), 3.0)


def expect_input(x: HostTensor) -> HostTensor:
    doubled = HostTensor(x.shape[0])
    doubled.set(expect(x, 2.0))
    return doubled


def test_close_frees_graphs_events_streams_and_buffers(
    bundle: loader.Bundle, fake: FakeLib
) -> None:
    twice = bundle.pipeline("twice")
    twice.warmup()
    assert fake.memory and fake.execs and fake.graphs and fake.events and fake.streams
    bundle.close()
    assert not fake.memory and not fake.execs and not fake.graphs
    assert not fake.events and not fake.streams
    with pytest.raises(loader.ArgumentError, match="is closed"):
        twice(HostTensor(2), HostTensor(2))


def test_threads_on_their_own_streams_get_their_own_results(
    bundle: loader.Bundle, fake: FakeLib, in_threads: Any
) -> None:
    twice = bundle.pipeline("twice")
    scale = bundle["scale"]
    errors: list[str] = []

    def work(k: int) -> None:
        for i in range(25):
            m = 1 + (k * 7 + i) % 20  # buckets 1 and 16 and 256, shared between threads
            x, out = HostTensor(m, fill=float(k + i % 3)), HostTensor(m)
            twice(x, out, stream=0x100 + k)
            single = HostTensor(m)
            scale(x, single, m, 64, 64, 6.0, stream=0x100 + k)
            want = expect(x, 6.0)
            if out.rows() != want:
                errors.append(f"thread {k} call {i}: pipeline result wrong")
            if single.rows() != want:
                errors.append(f"thread {k} call {i}: kernel result wrong")

    in_threads(6, work)
    assert not errors, errors[:5]
    assert len(fake.execs) == 3  # every bucket captured exactly once


class Offset(HostTensor):
    """A view of ones that starts 2 bytes into its buffer: not 16-byte aligned."""

    def __init__(self, rows: int):
        super().__init__(rows)
        self.buf = ctypes.create_string_buffer(rows * 64 * 2 + 16)
        struct.pack_into(f"<{rows * 64 + 8}e", self.buf, 0, *[1.0] * (rows * 64 + 8))

    def data_ptr(self) -> int:
        return super().data_ptr() + 2


def test_an_exact_size_call_binds_the_callers_tensors_instead_of_copying(
    bundle: loader.Bundle, fake: FakeLib
) -> None:
    twice = bundle.pipeline("twice")
    twice.warmup(M=[16])
    x, out = HostTensor(16, fill=1.0), HostTensor(16)
    fake.ops.clear()
    twice(x, out, stream=0x77)
    kinds = [op[0] for op in fake.ops if op[0] != "launch"]
    # x feeds step 0, out is written by step 1: both nodes point at the caller's tensors.
    assert kinds == ["wait", "set_params", "set_params", "graph", "record"]
    assert out.rows() == expect(x, 6.0) and twice.binds == {(16,): True}
    replayed = [launch for launch in fake.launches if launch.replayed]
    assert replayed[0].params[0] == x.data_ptr() and replayed[1].params[1] == out.data_ptr()
    fake.ops.clear()
    twice(x, out, stream=0x77)  # the same tensors again: nothing to change
    assert [op[0] for op in fake.ops if op[0] != "launch"] == ["graph", "record"]
    x2, out2 = HostTensor(16, fill=3.0), HostTensor(16)
    fake.ops.clear()
    twice(x2, out2, stream=0x77)
    assert [op[0] for op in fake.ops].count("set_params") == 2
    assert out2.rows() == expect(x2, 6.0) and out.rows() == expect(x, 6.0)
    # A padded call points the nodes back at the bucket's own buffers, then copies.
    x3, out3 = HostTensor(9, fill=2.0), HostTensor(9)
    fake.ops.clear()
    twice(x3, out3, stream=0x77)
    kinds = [op[0] for op in fake.ops if op[0] != "launch"]
    assert kinds == ["set_params", "set_params", "copy", "graph", "copy", "record"]
    assert out3.rows() == expect(x3, 6.0) and out2.rows() == expect(x2, 6.0)


def test_misaligned_tensors_are_copied_not_bound(bundle: loader.Bundle, fake: FakeLib) -> None:
    twice = bundle.pipeline("twice")
    x, out = Offset(16), HostTensor(16)
    fake.ops.clear()
    twice(x, out)
    assert "set_params" not in [op[0] for op in fake.ops]
    assert [op[0] for op in fake.ops].count("copy") == 2
    assert out.rows() == [[6.0] * 64] * 16


def test_a_graph_whose_nodes_cannot_be_read_always_copies(
    bundle: loader.Bundle, fake: FakeLib, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(graph: int) -> None:
        raise loader.CudaError(1, "CUDA_ERROR_INVALID_VALUE", "cuGraphGetNodes")

    monkeypatch.setattr(bundle.device.drv, "graph_kernel_nodes", fails)
    twice = bundle.pipeline("twice")
    x, out = HostTensor(16, fill=1.0), HostTensor(16)
    twice(x, out)
    assert "set_params" not in [op[0] for op in fake.ops]
    assert out.rows() == expect(x, 6.0) and twice.binds == {(16,): False}


@pytest.mark.parametrize(
    ("dtype", "value", "raw"),
    [("i32", -1, b"\xff\xff\xff\xff"), ("u8", 7, b"\x07"), ("fp16", 0.5, b"\x00\x38"),
     ("bf16", 1.0, b"\x80\x3f"), ("bf16", 1.00390625, b"\x80\x3f"),
     ("fp32", -2.0, b"\x00\x00\x00\xc0"),
     ("i64", 2**40, (2**40).to_bytes(8, "little"))],
)  # fmt: skip
def test_a_pad_value_is_one_element_as_the_device_stores_it(
    dtype: str, value: float, raw: bytes
) -> None:
    from loader.args import element_bytes

    assert element_bytes(dtype, value) == raw  # bf16 1 + 2**-8 rounds to even: 1.0


@pytest.mark.parametrize(
    ("dtype", "value"), [("i32", 0.5), ("i32", 2**31), ("u8", -1), ("i1", 1), ("fp16", 1e6),
                         ("bf16", 1e39), ("fp32", float("nan")), ("fp8e4nv", 0.0)],
)  # fmt: skip
def test_a_pad_value_its_dtype_cannot_hold_is_refused(dtype: str, value: float) -> None:
    from loader.args import element_bytes

    with pytest.raises(ValueError):
        element_bytes(dtype, value)


def test_a_manifest_padding_anything_but_an_input_is_refused() -> None:
    from loader import manifest as mf

    x = {"name": "x", "dtype": "i32", "shape": ["M"], "role": "input", "pad": -1}
    h = {"name": "h", "dtype": "i32", "shape": ["M"], "role": "scratch"}
    spec = {"name": "p", "dims": ["M"], "buckets": [[4]], "tensors": [x, h], "steps": []}
    assert mf.PipelineSpec.from_json(spec).tensors[0].pad == -1
    for bad in ({**x, "pad": 0.5}, {**x, "pad": 2**40}):
        with pytest.raises(loader.BundleError, match="pad"):
            mf.PipelineSpec.from_json({**spec, "tensors": [bad, h]})
    with pytest.raises(loader.BundleError, match="a scratch has no pad value"):
        mf.PipelineSpec.from_json({**spec, "tensors": [x, {**h, "pad": 0}]})


def test_a_step_with_a_condition_runs_only_at_the_buckets_where_it_holds(
    fake: FakeLib, tmp_path: Path
) -> None:
    """``when``: out = x * 2 through the buckets up to 16 rows, x * 4 above (a kernel picked
    per bucket, as a split-KV decode serves few sequences); each graph holds its steps only."""
    import dataclasses

    from loader import manifest as mf
    from loader.format import encode, write_atomic

    m = handmade.manifest()
    tensors = tuple(mf.PipelineTensor(n, "fp16", ("M", "64"), r)
                    for n, r in (("x", "input"), ("out", "output")))  # fmt: skip
    steps = (
        mf.PipelineStep("scale", ("x", "out", "M", "64", "64", 2.0), "M <= 16"),
        mf.PipelineStep("scale", ("x", "out", "M", "64", "64", 4.0), "M > 16"),
    )
    branchy = mf.PipelineSpec("branchy", ("M",), (handmade.BUCKETS,), tensors, steps)
    m = dataclasses.replace(m, pipelines=(*m.pipelines, branchy))
    path = tmp_path / "b.aotc"
    write_atomic(path, encode(m.to_json(), handmade.payloads(m)))
    with loader.open(path) as b:
        p = b.pipeline("branchy")
        for rows, factor in ((3, 2.0), (16, 2.0), (17, 4.0), (256, 4.0)):
            fake.launches.clear()
            x, out = HostTensor(rows, fill=0.5), HostTensor(rows)
            p(x, out)
            assert out.rows() == expect(x, factor)
            assert len(fake.launches) == 1  # one step in each bucket's graph
