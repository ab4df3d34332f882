"""The model product's bundle and report, pinned like the shipped recipes' (test_golden.py).

A CPU model bundle is not byte-for-byte reproducible: Inductor's artifacts differ from one
compilation to the next (they embed paths and build details), and the manifest records
measurements (compile seconds, the first artifact's size, relative errors, whose last
digits depend on the CPU). Everything else is pinned: the manifest without those
measurements and without the artifacts' entries (the kernels' cubins stay), and the
report with those columns blanked. The digests were recorded on the commit before the
model path became a product (aot/model/), with torch 2.13.0 for the CPU on x86_64, for
the tiny test model alone and beside the small test kernel.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from aot.build import build
from aot.model import ModelOptions
from loader.format import BundleFile, canonical_json

from .conftest import env_for

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
MEASURED = ("compile_s", "first_bytes", "rel_err", "pad_rel_err")

GOLDEN = {  # recipe: (manifest, report)
    "tiny": (
        "1a4e72c4fa91809183a9168e09c4d09710bc9b780117c7a8288e2592545856b5",
        "29f008b5ebbd9a87f71be0189b3dc291996a6d8299e37af3e6873bb62dee37da",
    ),
    "mixed": (
        "acb3d5b277fff6a25e2e3f120bfd37801498d2104a85d8fa8f983b7ae089e305",
        "e14205f9b3f78c825e831c5bf69948d2f3b452e7d1c09c89772dee3036828d4b",
    ),
}


def stable_manifest(bundle: Path) -> dict[str, Any]:
    """The manifest less what a rebuild measures anew."""
    with BundleFile(bundle) as f:
        m: dict[str, Any] = json.loads(json.dumps(f.manifest))
    del m["payload_size"]
    m["entries"] = {k: v for k, v in m["entries"].items() if not k.startswith("model/")}
    for arts in m["model"]["artifacts"]:
        for b in arts["buckets"]:
            for metrics in (b["metrics"], *b["metrics"].get("modes", {}).values()):
                for k in MEASURED:
                    metrics.pop(k, None)
    return m


def stable_report(bundle: Path) -> str:
    """The report with the model table's measured columns blanked."""
    text = bundle.with_suffix(".report.md").read_text()
    row = re.compile(r"^(\| \w+=[^|]*\| )[^|]*\|[^|]*\|[^|]*(\|[^|]*\| )[^|]*\|", re.M)
    return row.sub(r"\1 | | \2 |", text)


def digests(bundle: Path) -> tuple[str, str]:
    manifest = hashlib.sha256(canonical_json(stable_manifest(bundle))).hexdigest()
    return manifest, hashlib.sha256(stable_report(bundle).encode()).hexdigest()


def _mixed(tmp: Path) -> Path:
    """tests/data/small.toml's kernel with tests/data/model/tiny.toml's model."""
    shutil.copytree(DATA / "kernels", tmp / "kernels")
    shutil.copy(DATA / "model" / "tiny.py", tmp / "tiny.py")
    model = (DATA / "model" / "tiny.toml").read_text().split("[model]", 1)[1]
    (tmp / "r.toml").write_text((DATA / "small.toml").read_text() + "\n[model]" + model)
    return tmp / "r.toml"


@pytest.mark.parametrize("recipe", list(GOLDEN))
def test_model_bundles_build_the_same_records(
    recipe: str, tmp_path: Path, compile_cache: Path
) -> None:
    path = DATA / "model" / "tiny.toml" if recipe == "tiny" else _mixed(tmp_path / "src")
    out = tmp_path / f"{recipe}.aotc"
    env = env_for(compile_cache)
    build(path, out, env, ROOT, model=ModelOptions(device="cpu"))
    assert digests(out) == GOLDEN[recipe]
