"""A TMA kernel as Triton's tutorials ship it builds unchanged (issue 21, issue 18's
"kernels as their authors ship them"): host ``TensorDescriptor`` arguments whose block
shapes an autotune config's pre_hook sets, a ``NUM_SMS`` constexpr, a signature read from
``inputs`` (which builds descriptors, as the author's wrapper does). The pre_hook becomes
the recipe's ``descriptors``; the loader takes the author's TensorDescriptors (or plain
tensors) and encodes each variant's own tensor maps, whatever block the caller's
descriptor names. A pre_hook that is not block shapes is refused, naming the key that
replaces it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import loader
from aot.build import build
from aot.errors import RecipeError
from aot.recipe import load
from loader.errors import ArgumentError
from loader.format import BundleFile
from loader.manifest import Manifest
from tests.conftest import env_for
from tests.fakecuda import FakeLib

DATA = Path(__file__).parent / "data" / "tma_shipped"
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tma_shipped")
    shutil.copytree(DATA, root / "r")
    build(root / "r" / "tma.toml", root / "t.aotc", env_for(root / "cache"), root)
    return root / "t.aotc"


def test_the_pre_hook_becomes_the_descriptors_and_the_signature_is_inferred() -> None:
    kr = load(DATA / "tma.toml").kernels[0]
    assert {n: [e.text for e in b] for n, b in kr.descriptors.items()} == {
        "a_desc": ["BLOCK_M", "BLOCK_K"],
        "b_desc": ["BLOCK_K", "BLOCK_N"],
        "c_desc": ["BLOCK_M", "BLOCK_N"],
    }
    assert dict(kr.signature) == {"a_desc": "*T", "b_desc": "*T", "c_desc": "*T",
                                  "M": "i32", "N": "i32", "K": "i32"}  # fmt: skip
    assert len(kr.configs) == 2  # @triton.autotune's, pre_hook and all


def test_the_bundle_has_each_targets_maps_and_sm_count(bundle: Path) -> None:
    with BundleFile(bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    k = m.kernels[0]
    assert k.descriptors == ("a_desc", "b_desc", "c_desc")
    for inst in k.instances:
        for v in inst.variants.values():
            assert v.meta["NUM_SMS"] == {"H100-PCIE": 114, "H200": 132}[inst.target]
            assert [d.param for d in v.descriptors] == ["a_desc", "b_desc", "c_desc"]


class _Tensor:
    def __init__(self, addr: int, shape: tuple[int, ...]):
        self.addr, self.shape, self.dtype, self.is_cuda = addr, shape, "torch.float16", True

    def data_ptr(self) -> int:
        return self.addr

    def stride(self) -> tuple[int, ...]:
        return (self.shape[1], 1)


class _Descriptor:
    """What loader sees of triton.tools.tensor_descriptor.TensorDescriptor."""

    def __init__(self, t: _Tensor, block: list[int], padding: str = "zero"):
        self.base, self.shape, self.strides = t, list(t.shape), list(t.stride())
        self.block_shape, self.padding = block, padding


def _args(m: int, wrap: Any) -> list[Any]:
    a, b, c = _Tensor(0x100000, (m, 4096)), _Tensor(0x200000, (4096, 4096)), _Tensor(
        0x300000, (m, 4096))  # fmt: skip
    return [wrap(a), wrap(b), wrap(c), m, 4096, 4096]


def test_the_authors_descriptors_are_passed_with_each_variants_blocks(
    fake: FakeLib, bundle: Path
) -> None:
    kernel = loader.open(bundle)["matmul"]
    dummy = _args(100, lambda t: _Descriptor(t, [1, 1]))  # the wrapper's dummy blocks
    v = kernel.variant_for(*dummy)
    kernel(*dummy)
    kernel(*dummy)  # the fast path, the maps cached
    assert len(fake.launches) == 2 and fake.launches[0].params == fake.launches[1].params
    assert [call[5] for call in fake.tensor_maps] == [tuple(reversed(d.block))
                                                      for d in v.descriptors]  # fmt: skip
    tiles = -(-100 // v.meta["BLOCK_M"]) * (4096 // v.meta["BLOCK_N"])
    assert fake.launches[-1].grid == (min(132, tiles), 1, 1)
    kernel(*_args(100, lambda t: t))  # plain tensors: the same maps
    assert fake.launches[-1].params == fake.launches[0].params
    with pytest.raises(ArgumentError, match="padding='nan'"):
        kernel(*_args(100, lambda t: _Descriptor(t, [1, 1], "nan")))


HOOKS = {
    "zeroes a buffer": '    nargs["c_desc"].base.zero_()\n',
    "branches": '    if nargs["BLOCK_M"] > 64:\n        nargs["a_desc"].block_shape = [64, 64]\n',
}


@pytest.mark.parametrize("body", list(HOOKS.values()), ids=list(HOOKS))
def test_a_pre_hook_that_is_not_block_shapes_is_refused(tmp_path: Path, body: str) -> None:
    shutil.copytree(DATA, tmp_path / "r")
    src = tmp_path / "r" / "tma_tutorial.py"
    text = src.read_text()
    start = text.index('    BLOCK_M = nargs["BLOCK_M"]')
    end = text.index("@triton.autotune")
    src.write_text(text[:start] + body + "\n\n" + text[end:])
    with pytest.raises(RecipeError) as err:
        load(tmp_path / "r" / "tma.toml")
    msg = str(err.value)
    assert "matmul.source" in msg and "pre_hook cannot be read" in msg
    assert "matmul.descriptors" in msg
    # The recipe's descriptors replace the hook.
    recipe = tmp_path / "r" / "tma.toml"
    table = ('descriptors = { a_desc = ["BLOCK_M", "BLOCK_K"], b_desc = ["BLOCK_K", "BLOCK_N"], '
             'c_desc = ["BLOCK_M", "BLOCK_N"] }\n')  # fmt: skip
    recipe.write_text(recipe.read_text() + table)
    assert load(recipe).kernels[0].descriptors.keys() == {"a_desc", "b_desc", "c_desc"}


def test_init_drafts_it_with_its_configs_and_each_targets_sm_count(tmp_path: Path) -> None:
    from tests.test_init import draft_of, invoke

    shutil.copy(DATA / "tma_tutorial.py", tmp_path)
    r = invoke(["init", str(tmp_path / "tma_tutorial.py")], tmp_path / "c")
    assert r.exit_code == 0, r.output
    doc, _ = draft_of(tmp_path / "tma_tutorial.toml")
    (k,) = doc["kernel"]
    assert "space" not in k  # the autotune configs, pre_hook and all, are the space
    assert k["fixed"] == {"GROUP_M": 8, "NUM_SMS": "NUM_SMS"}  # as its wrapper launches
