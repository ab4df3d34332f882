"""A content-addressed store for compile results: key = sha256 of everything that can
change the output. An entry is a cubin file plus a JSON record, each written atomically;
the record is written last, so its presence means the entry is complete."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from loader.format import canonical_json, write_atomic

# 2: cubins compiled without line info (no absolute source paths inside).
# 3: failures are cached only when the compiler gave them; a v2 cache could hold jobs an
#    interrupt cancelled, recorded as failures, and builds from it never healed.
# 4: tensor descriptors and global scratch are compiled (aotc refused them before, and a
#    v3 cache holds those refusals as the compiler's verdicts).
SCHEMA = 4


def key_of(parts: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json({"schema": SCHEMA, **parts})).hexdigest()


class CompileCache:
    def __init__(self, root: Path | None):
        self.root = None if root is None else Path(root) / f"compile-v{SCHEMA}"

    def _paths(self, key: str) -> tuple[Path, Path]:
        assert self.root is not None
        d = self.root / key[:2]
        return d / f"{key}.json", d / f"{key}.cubin"

    def has(self, key: str) -> bool:
        return self.root is not None and self._paths(key)[0].exists()

    def get(self, key: str) -> tuple[dict[str, Any], bytes] | None:
        if self.root is None:
            return None
        meta_path, cubin_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text())
            cubin = cubin_path.read_bytes() if meta.get("ok") else b""
        except (OSError, ValueError):
            return None
        if meta.get("ok") and hashlib.sha256(cubin).hexdigest() != meta.get("cubin_sha256"):
            return None  # a damaged entry is a miss, never a wrong cubin
        return meta, cubin

    def put(self, key: str, meta: dict[str, Any], cubin: bytes) -> None:
        if self.root is None:
            return
        meta_path, cubin_path = self._paths(key)
        if meta.get("ok"):
            write_atomic(cubin_path, cubin)
            meta = {**meta, "cubin_sha256": hashlib.sha256(cubin).hexdigest()}
        write_atomic(meta_path, canonical_json(meta))
