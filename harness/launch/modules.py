"""Compiled modules of our CUDA kernels, shared by the build and the run: the build's offline NVRTC
compile of a kernel (harness.build.toolchain) leaves its cubin here, and the group process loads
that cubin instead of compiling the same source again through CuPy.

The census compile and CuPy's run-time compile are one compile: the same NVRTC library, source,
options (ours, a variant's defines, CuPy's implicit ones and `-arch=sm_XX`: `nvrtc_options`) and
name expression; so the census describes the very code that runs, and a fresh machine compiles
each kernel once instead of once in the build and again in every group process that launches it.

An entry is keyed by the SHA-256 of everything that determines the cubin: the source's bytes, the
full NVRTC options, the name expression, the NVRTC version and the architecture (`key`). It holds
the cubin and the lowered (mangled) name of the expression, written under a partial name and
renamed into place whole, so a reader sees a whole entry or none. A run that finds no entry (no
build on this machine, another NVRTC, the cache off) compiles through CuPy as before; either way
the group process records which (`loaded`).

Where: `modules/` under the build cache's folder (`$EVIDENCE_BUILD_CACHE`, `off` for none, else
`$XDG_CACHE_HOME/kernel-evidence/build`, else `~/.cache/kernel-evidence/build`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

ENV = "EVIDENCE_BUILD_CACHE"

CUPY_IMPLICIT_OPTIONS: tuple[str, ...] = ("-ftz=true", "--device-as-default-execution-space")
"""Options CuPy 13/14 appends for NVRTC on its own (besides `-arch` and `--pch`, which changes no
code): the census compile adds them too, since `-ftz=true` changes the generated code."""


def cache_root() -> Path | None:
    """The build cache's folder, or None where `$EVIDENCE_BUILD_CACHE` is `off`."""
    given = os.environ.get(ENV, "")
    if given.lower() == "off":
        return None
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernel-evidence" / "build"


def nvrtc_options(options: Sequence[str], arch: str) -> tuple[str, ...]:
    """The NVRTC options of the run-time compile: ours, CuPy's implicit ones and the arch."""
    extra = [o for o in CUPY_IMPLICIT_OPTIONS if o not in options]
    return (*options, *extra, f"-arch={arch}")


def key(source: str, options: Sequence[str], name_expression: str, nvrtc_version: str, arch: str) -> str:
    """The key of one compiled module (module docstring); `options` as `nvrtc_options` gives them."""
    parts = {"source": hashlib.sha256(source.encode()).hexdigest(), "options": list(options),
             "name_expression": name_expression, "nvrtc": nvrtc_version, "arch": arch}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _entry(key_: str) -> Path | None:
    folder = cache_root()
    return None if folder is None else folder / "modules" / key_[:2] / key_


def store(key_: str, cubin: bytes, lowered: str) -> None:
    """Keep a compiled module under `key_`, whole or not at all (a cache that cannot be written
    leaves the build as it is)."""
    entry = _entry(key_)
    if entry is None or (entry / "lowered.json").is_file():
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{entry.name}.partial-", dir=entry.parent))
    except OSError:
        return
    try:
        (partial / "module.cubin").write_bytes(cubin)
        (partial / "lowered.json").write_text(json.dumps({"lowered": lowered}))
        if not entry.exists():
            os.rename(partial, entry)
    except OSError:
        pass  # another writer's entry, or no room
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def load(key_: str) -> tuple[Path, str] | None:
    """(the cubin's path, the lowered name) of a whole entry, else None."""
    entry = _entry(key_)
    if entry is None:
        return None
    try:
        lowered = json.loads((entry / "lowered.json").read_text())["lowered"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    cubin = entry / "module.cubin"
    if not isinstance(lowered, str) or not lowered or not cubin.is_file():
        return None
    return cubin, lowered
