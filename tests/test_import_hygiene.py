"""The loader's promises: importing it pulls in none of aot, triton or torch; and a service
that launches kernels imports only the loader modules that launching needs (cold start is
what a bundle is for), the others on first use."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

from loader import manifest as mf
from loader.format import encode, write_atomic
from tests import handmade

ROOT = Path(__file__).resolve().parents[1]

# What ``import loader`` loads: opening a bundle and launching its kernels. Adding a module
# here costs every service's start-up; import it where it is first needed instead.
AT_IMPORT = {
    "loader", "loader.args", "loader.buckets", "loader.bundle", "loader.codec",
    "loader.cubin", "loader.descriptors", "loader.device", "loader.dispatch",
    "loader.driver", "loader.errors", "loader.expr", "loader.fastcall", "loader.format",
    "loader.hints", "loader.kernel", "loader.launch", "loader.manifest", "loader.manifest_types",
    "loader.scratch", "loader.validity",
}  # fmt: skip
# ... and what opening a bundle of kernels (no pipelines, models, ops, build record, or
# signature) and launching one adds: the manifest's cross-field checks.
AT_LAUNCH = AT_IMPORT | {"loader.checks"}
# Imported on first use only: never by a service that opens kernels and launches them.
ON_FIRST_USE = {
    "loader.credentials", "loader.download", "loader.graph", "loader.keywords",
    "loader.manifest_build",
    "loader.manifest_model", "loader.manifest_pipeline", "loader.model", "loader.model_load",
    "loader.oci", "loader.op", "loader.pipeline", "loader.profile", "loader.reference",
    "loader.registry", "loader.retry", "loader.signature", "loader.trailer",
    "loader.transport",
}  # fmt: skip


def loader_modules(code: str, *args: str) -> set[str]:
    """The loader modules a fresh process has loaded after running ``code``."""
    code += "\nimport sys; print(' '.join(m for m in sys.modules if m.split('.')[0] == 'loader'))"
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                         text=True, check=True)  # fmt: skip
    return set(out.stdout.split())


def test_import_loader_pulls_in_no_builder_or_frameworks() -> None:
    code = (
        "import sys, loader, loader.bundle, loader.driver, loader.format, loader.manifest\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('aot', 'triton', 'torch'))\n"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_import_loader_loads_only_what_launching_needs() -> None:
    loaded = loader_modules("import loader")
    assert loaded == AT_IMPORT, f"added: {loaded - AT_IMPORT}; gone: {AT_IMPORT - loaded}"


def test_opening_a_bundle_of_kernels_and_launching_loads_nothing_else(tmp_path: Path) -> None:
    m = dataclasses.replace(handmade.manifest(), pipelines=())
    path = tmp_path / "kernels.aotc"
    write_atomic(path, encode(m.to_json(), handmade.payloads(m)))
    code = (
        "import sys, loader\n"
        "from loader import driver\n"
        "from tests.fakecuda import FakeLib, FakeTensor\n"
        "driver.install(driver.Driver(FakeLib()))\n"
        "b = loader.open(sys.argv[1])\n"
        "b['scale'](FakeTensor(0x10000), FakeTensor(0x20000), 20, 256, 1, 2.0)\n"
        "b['scale'](FakeTensor(0x10000), FakeTensor(0x20000), 20, 256, 1, 2.0)  # fast path"
    )
    loaded = loader_modules(code, str(path))
    assert loaded == AT_LAUNCH, f"added: {loaded - AT_LAUNCH}; gone: {AT_LAUNCH - loaded}"
    assert AT_LAUNCH.isdisjoint(ON_FIRST_USE)


def test_every_section_decodes_in_a_fresh_process(tmp_path: Path) -> None:
    """The records of pipelines, ops and build records are imported as a manifest needs
    them (loader/manifest.py ``__getattr__``, resolved by the codec): a fresh process that
    has imported none decodes them all, and writes back the same JSON."""
    base = handmade.manifest()
    twin = dataclasses.replace(base.kernels[0], name="scale2")
    m = dataclasses.replace(
        base,
        kernels=(base.kernels[0], twin),
        ops=(mf.OpSpec("either", ("scale", "scale2"), ()),),
        build={"failed": [{"kernel": "scale", "target": "sm_90", "dtypes": {"T": "fp16"},
                           "config": "c9", "spec": "g", "reason": "out of registers"}]},
    )  # fmt: skip
    doc = tmp_path / "manifest.json"
    doc.write_text(json.dumps(m.to_json()))
    code = (
        "import json, sys\n"
        "from loader.manifest import Manifest\n"
        "raw = json.loads(open(sys.argv[1]).read())\n"
        "m = Manifest.from_json(raw)\n"
        "assert m.to_json() == raw, 'round trip'\n"
        "assert len(m.pipelines) == 3 and m.ops[0].name == 'either', m\n"
    )
    loaded = loader_modules(code, str(doc))
    assert {"loader.manifest_pipeline", "loader.manifest_build", "loader.op"} <= loaded
    assert "loader.manifest_model" not in loaded


def test_names_imported_on_first_use_are_the_defining_modules() -> None:
    code = (
        "import loader, loader.format as fmt, loader.manifest as mf\n"
        "from loader import manifest_build, manifest_model, manifest_pipeline, op, trailer\n"
        "from loader.model import load_model\n"
        "from loader.pipeline import Pipeline\n"
        "assert loader.load_model is load_model and loader.Pipeline is Pipeline\n"
        "for module in (manifest_build, manifest_model, manifest_pipeline, op):\n"
        "    for name in [n for n, m in mf._LAZY.items() if m == module.__name__[7:]]:\n"
        "        assert getattr(mf, name) is getattr(module, name), name\n"
        "for name in fmt._TRAILER_NAMES:\n"
        "    assert getattr(fmt, name) is getattr(trailer, name), name\n"
        "from loader.manifest import *  # every name of __all__ resolves\n"
        "from loader.format import *\n"
        "from loader import *\n"
    )
    loader_modules(code)


def test_loader_sources_never_import_builder_or_frameworks() -> None:
    banned = re.compile(r"^\s*(import|from)\s+(aot|triton|torch|pickle)\b", re.M)
    for path in (ROOT / "loader").glob("*.py"):
        match = banned.search(path.read_text())
        assert match is None, f"{path.name}: {match.group(0) if match else ''}"


def test_no_pickle_in_the_builder() -> None:
    for path in (ROOT / "aot").glob("*.py"):
        assert "import pickle" not in path.read_text(), path.name
