"""The census of the `external` implementation kind: its entry function described like
harness.build.build describes our kernels (ptxas -v for PTX; the cubin's own resource table for a
cubin)."""

from __future__ import annotations

import hashlib
import math
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.build import build, census, toolchain
from harness.errors import EvidenceError
from harness.launch.external import (
    SASS_SHARED_RESERVE,
    check_block,
    check_entry,
    check_shared,
    resolve_path,
)
from harness.launch.instances import InstanceShapes


@dataclass(frozen=True)
class ExternalInstance:
    """The external kernel as a census item (what harness.build.census_row reads)."""

    kernel: str
    specialization: str


def describe(ext_cfg: Mapping[str, Any]) -> str:
    """'grid (cdiv(cols, 32), cdiv(rows, 32)) block (32, 8) shared 0' for tables."""
    grid = ", ".join(str(g) for g in ext_cfg["grid"])
    block = ", ".join(str(b) for b in ext_cfg["block"])
    return f"grid ({grid}) block ({block}) shared {ext_cfg.get('shared_bytes', 0)}"


def census_rows(op: Any, ext_cfg: Mapping[str, Any], arch: str = "sm_90",
                outdir: Path | str | None = None, *, shapes: Iterable[Sequence[int]] = (),
                root: Path = ROOT) -> list[dict[str, Any]]:
    """One census row (keys: harness.build.CENSUS_COLUMNS) for the entry function of an external
    PTX or cubin. PTX: ptxas -v for `arch` gives the cubin and the resource report. Cubin: the
    resource table and SASS of the cubin itself; its PTX counts and spills read 0 (unknown), as its
    `options` text says. With `outdir`, the PTX, SASS, cubin and reports are written there."""
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise EvidenceError(f"Architecture {arch!r} is not of the form sm_90.")
    op_name = getattr(op, "name", str(op))
    full = resolve_path(ext_cfg.get("path") if isinstance(ext_cfg, Mapping) else None, root)
    entry = check_entry(ext_cfg.get("entry"), full)
    block = check_block(ext_cfg.get("block"))
    if full.suffix == ".ptx":
        parts = _ptx_parts(full, entry, arch)
    else:
        parts = _cubin_parts(full, entry, arch)
    files, info = parts
    build.write_artifacts(Path(outdir) if outdir is not None else None, f"external_{build.slug(entry)}", files)
    item = InstanceShapes(ExternalInstance(entry, describe(ext_cfg)),
                         tuple(tuple(int(d) for d in s) for s in shapes))
    row = build.census_row(
        op=op_name, impl="external", kernel=entry, item=item, arch=info["arch"], symbol=entry,
        block=math.prod(block), ptxas=info["ptxas"], res=info["res"], ptx=info["ptx"],
        sass=info["sass"], dynamic_smem=check_shared(ext_cfg.get("shared_bytes", 0)),
        source_sha256=hashlib.sha256(full.read_bytes()).hexdigest(), sass_text=str(files["sass"]),
        compiler=info["compiler"], options=info["options"])
    return [row]


def _ptx_target(ptx: str) -> str | None:
    match = re.search(r"^\s*\.target\s+(sm_\d+a?)", ptx, re.M)
    return match.group(1) if match else None


def _ptx_parts(full: Path, entry: str, arch: str) -> tuple[dict[str, str | bytes], dict[str, Any]]:
    """ptxas -v on the PTX for `arch` (or its own sm_XXa target of the same number)."""
    ptx = full.read_text()
    target = _ptx_target(ptx)
    if target is not None and target.rstrip("a") == arch.rstrip("a"):
        arch = target  # an sm_90a PTX must be assembled for sm_90a
    ptxas = toolchain.require_tool("ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        cubin_path = Path(tmp) / "kernel.cubin"
        proc = toolchain.run_tool([ptxas, "-v", f"-arch={arch}", full, "-o", cubin_path],
                                    f"ptxas on {full.name}")
        cubin = cubin_path.read_bytes()
    log = proc.stderr + proc.stdout
    sass_text = toolchain.disassemble(cubin)
    res_text = toolchain.resource_usage(cubin)
    isa = re.search(r"^\s*\.version\s+(\d+\.\d+)", ptx, re.M)
    info = {
        "arch": arch,
        "ptxas": build.pick(census.parse_ptxas_log(log), entry, "ptxas log"),
        "res": build.pick(census.parse_res_usage(res_text), entry, "cubin resource table"),
        "ptx": build.pick(census.parse_ptx(ptx), entry, "PTX"),
        "sass": build.pick(census.parse_sass(sass_text), entry, "SASS"),
        "compiler": f"external PTX ISA {isa.group(1) if isa else 'unknown'} "
                    f"(ptxas {toolchain.tool_version(ptxas)})",
        "options": f"ptxas -v -arch={arch} (at run time the driver JIT-compiles the same PTX)",
    }
    files: dict[str, str | bytes] = {"ptx": ptx, "sass": sass_text, "ptxas.log": log,
                                     "res-usage.txt": res_text, "cubin": cubin}
    return files, info


def _cubin_parts(full: Path, entry: str, arch: str) -> tuple[dict[str, str | bytes], dict[str, Any]]:
    """The cubin's own resource table and SASS; no PTX and no ptxas report exist."""
    cubin = full.read_bytes()
    sass_text = toolchain.disassemble(cubin)
    res_text = toolchain.resource_usage(cubin)
    built_for = re.search(r"code for (sm_\d+a?)", sass_text)
    cubin_arch = built_for.group(1) if built_for else "unknown"
    if cubin_arch.rstrip("a") != arch.rstrip("a"):
        raise EvidenceError(f"{full.name} holds code for {cubin_arch}, but the census is for "
                            f"{arch}.")
    res = build.pick(census.parse_res_usage(res_text), entry, "cubin resource table")
    static_smem = max(0, res.shared - SASS_SHARED_RESERVE) if res.shared else 0
    ptxas = census.PtxasInfo(registers=res.registers, stack_bytes=res.stack,
                             smem_bytes=static_smem, entry=True)
    cuobjdump = toolchain.require_tool("cuobjdump")
    info = {
        "arch": cubin_arch,
        "ptxas": ptxas,
        "res": res,
        "ptx": census.PtxCounts(entry=True),
        "sass": build.pick(census.parse_sass(sass_text), entry, "SASS"),
        "compiler": f"external cubin (read by cuobjdump {toolchain.tool_version(cuobjdump)})",
        "options": "cubin as delivered: no PTX and no ptxas report, so the PTX counts and spills "
                   "read 0 (unknown); registers, stack and shared memory are the cubin's own",
    }
    return {"sass": sass_text, "res-usage.txt": res_text}, info


