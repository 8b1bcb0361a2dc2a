"""The build cache: one offline build (its census rows and the PTX, SASS, cubin and reports it
wrote), kept under a key of everything the build depends on, so that a namespace whose kernels did
not change takes them from the cache instead of compiling again. The build step keeps each
compiled instance of a kernel apart (`key` with `instance`, `built_into`), so that a namespace of
other shapes takes every instance it shares with an earlier one.

The key is the SHA-256 of: the operation, implementation, variant (name and compiler options),
shapes (none for an instance) or the instance's identity (`instance_identity`), architecture and
CUDA compiler choice; the bytes of every source the build reads (the
operation's kernels and host dispatch, `harness.ops.sources`, and the build and launch code of
harness/build/ and harness/launch/); and the compilers' identities (NVRTC's version, Triton's,
and the path and version of ptxas, cuobjdump and nvcc). A change to any of them is another key.

Where: `$EVIDENCE_BUILD_CACHE` (a folder, or `off` for no cache), else
`$XDG_CACHE_HOME/kernel-evidence/build`, else `~/.cache/kernel-evidence/build`. An entry is
written under a partial name private to its writer and renamed into place whole, so a reader sees
a complete entry or none, and two writers of one key leave one entry. An entry that is not whole
(no rows.json) is built again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import ROOT, ops
from harness.build import toolchain
from harness.launch import modules

ENV = modules.ENV

CODE_DIRS = ("harness/build", "harness/launch")
"""The build and launch code whose edit can change what a build writes."""


def root() -> Path | None:
    """The cache's folder (module docstring), or None where `$EVIDENCE_BUILD_CACHE` is `off`."""
    return modules.cache_root()


@functools.cache
def compilers() -> dict[str, str]:
    """The identity of every compiler and disassembler a build may use (once per process)."""
    out: dict[str, str] = {}
    nvrtc = toolchain.load_nvrtc()
    out["nvrtc"] = ".".join(map(str, nvrtc.version())) if nvrtc is not None else "absent"
    try:
        out["triton"] = metadata.version("triton")
    except metadata.PackageNotFoundError:
        out["triton"] = "absent"
    for tool in ("ptxas", "cuobjdump", "nvcc"):
        path = toolchain.find_tool(tool)
        out[tool] = f"{path} {toolchain.tool_version(path)}" if path is not None else "absent"
    return out


def _digests(paths: Sequence[str], base: Path) -> dict[str, str]:
    return {rel: hashlib.sha256((base / rel).read_bytes()).hexdigest() for rel in paths}


def key(op: str, impl: str, shapes: Sequence[Sequence[int]], arch: str, *,
        variant: tuple[str, Sequence[str]] | None = None, cuda_compiler: str = "auto",
        base: Path = ROOT, sources_root: Path | None = None, instance: Any = None) -> str:
    """The cache key of one build (module docstring); `sources_root`: the kernels come from that
    tree's kernels/ (build_census's `sources_root`), the host code from `base`. With `instance`
    (one compiled instance, harness.launch.instances), the key of that instance's build alone
    (`instance_identity`), whatever shapes it serves: a namespace of other shapes that needs the
    same instance takes it from the cache."""
    code = sorted(str(p.relative_to(base)) for d in CODE_DIRS for p in (base / d).glob("*.py"))
    digest = ops.source_digest(op, base)
    if sources_root is not None:  # the revision's kernels, and its dispatch where it has one (ops.dispatch)
        theirs = {rel: sha for rel, sha in ops.source_digest(op, sources_root).items()
                  if rel.startswith("kernels/") or rel == _dispatch_rel(op)}
        mine = {rel: sha for rel, sha in digest.items()
                if not rel.startswith("kernels/") and not (rel == _dispatch_rel(op) and rel in theirs)}
        digest = {**mine, **{f"at:{rel}": sha for rel, sha in theirs.items()}}
    parts = {
        "op": op, "impl": impl, "shapes": [list(s) for s in shapes], "arch": arch,
        "variant": [variant[0], list(variant[1])] if variant else None, "cuda_compiler": cuda_compiler,
        "sources": digest, "code": _digests(code, base), "compilers": compilers(),
    }
    if instance is not None:
        parts["instance"] = instance_identity(instance)
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _dispatch_rel(op: str) -> str:
    return str(ops.dispatch_file(op, "."))  # Path('.') / 'harness' is 'harness': relative to a root


INSTANCE_FIELDS = ("source", "kernel", "block", "specialization", "dynamic_smem", "num_warps")
INSTANCE_CALLS = ("signature", "constexprs", "aligned_args", "compile_options")


def instance_identity(instance: Any) -> dict[str, Any]:
    """What a compiled instance is (harness.launch.instances: CudaSpec, TritonSpec): its source,
    kernel (a CUDA name expression or a Triton function), block, specialization and launch's
    dynamic shared memory, and for Triton its warps, signature, constexprs, aligned arguments and
    compile options."""
    out: dict[str, Any] = {name: getattr(instance, name) for name in INSTANCE_FIELDS if hasattr(instance, name)}
    for name in INSTANCE_CALLS:
        call = getattr(instance, name, None)
        if callable(call):
            out[name] = call()
    return out


def _entry(folder: Path, key_: str) -> Path:
    return folder / key_[:2] / key_


def built(key_: str, outdir: Path, build: Callable[[], list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], bool]:
    """The census rows of one build into `outdir`, and whether they came from the cache: from the
    entry of `key_` where there is a whole one (its files copied into `outdir`), else from
    `build()`, whose rows and files then become the entry."""
    folder = root()
    if folder is None:
        return build(), False
    entry = _entry(folder, key_)
    rows_file = entry / "rows.json"
    if rows_file.is_file():
        try:
            rows = json.loads(rows_file.read_text())
        except ValueError:
            rows = None
        if isinstance(rows, list):
            if (entry / "files").is_dir():
                shutil.copytree(entry / "files", outdir, dirs_exist_ok=True)
            return rows, True
    rows = build()
    _store(entry, rows, outdir)
    return rows, False


def built_into(key_: str, outdir: Path, build: Callable[[Path], list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], bool]:
    """`built` for a build that writes its files into the folder it is given (one instance among
    others in `outdir`): from the entry of `key_` where there is a whole one, its files copied into
    `outdir`; else `build` into a fresh folder, whose rows and files become the entry and whose
    files are copied into `outdir`."""
    folder = root()
    if folder is None:
        return build(outdir), False
    with tempfile.TemporaryDirectory(prefix="instance-") as own:
        made = Path(own) / "files"
        rows, hit = built(key_, made, lambda: build(made))
        if made.is_dir():
            shutil.copytree(made, outdir, dirs_exist_ok=True)
    return rows, hit


def _store(entry: Path, rows: list[dict[str, Any]], outdir: Path) -> None:
    """Write the entry under a private partial name and rename it into place whole; a writer that
    finds the entry already there (another build of the same key) leaves that one."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{entry.name}.partial-", dir=entry.parent))
    except OSError:
        return  # a cache folder that cannot be written: the build stands without an entry
    try:
        if outdir.is_dir():
            shutil.copytree(outdir, partial / "files")
        (partial / "rows.json").write_text(json.dumps(rows))
        if (entry / "rows.json").is_file():
            return  # another build of the same key finished first: its entry stands
        if entry.exists():
            shutil.rmtree(entry)  # not whole: replaced
        os.rename(partial, entry)
    except OSError:
        pass  # another writer's entry, or no room: the build stands without a cache entry
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def describe(key_: str, hit: bool) -> str:
    """The census table's `build` cell: 'cache <key>' for a build taken from the cache, else 'built'."""
    return f"cache {key_[:16]}" if hit else "built"
