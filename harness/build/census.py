"""Pure parsers for compiler output: what the census reads off a kernel without running it.

Every count here is a STATIC count of instructions in the code (how many load instructions the
function contains), not a dynamic count of instructions executed: a load inside a loop counts
once, a load in a branch that never runs counts too. They answer "are the loads 128 bits wide,
is there local memory, how many barriers are there", not "how many bytes moved".

Inputs (text only, no tool is run here):
  * `parse_ptxas_log`: ptxas `-v` output (from nvcc/ptxas, NVRTC's `-Xptxas=-v` program log, or
    Triton's ptxas log): registers, spills, stack frame, static shared and constant memory.
  * `parse_res_usage`: `cuobjdump -res-usage` of a cubin: registers, stack, shared, local, constant.
  * `parse_ptx`: PTX: global loads and stores by width, read-only (`.nc`) loads, barriers, shuffles.
  * `parse_sass`: `cuobjdump -sass` or `nvdisasm` SASS: LDG/STG by width, BAR, SHFL, LDL/STL.
Each returns a dict keyed by (mangled) function name.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

# ----------------------------------------------------------------------------- ptxas -v


@dataclass
class PtxasInfo:
    """ptxas's resource report for one function (bytes unless said otherwise)."""

    registers: int = 0
    barriers: int = 0
    """Named barriers the function uses (ptxas >= 12 reports them)."""
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    smem_bytes: int = 0
    """Static shared memory (dynamic shared memory is a launch parameter, not in the report)."""
    cmem_bytes: dict[int, int] = field(default_factory=dict)
    """Constant memory by bank, e.g. {0: 360}; recent ptxas versions no longer print it."""
    entry: bool = False
    """True for an entry (`__global__`) function, False for a device function."""


_PTXAS_PREFIX = r"ptxas[\w-]*\s+info\s*:\s*"
_RE_COMPILING = re.compile(_PTXAS_PREFIX + r"Compiling entry function '([^']+)'")
_RE_PROPERTIES = re.compile(_PTXAS_PREFIX + r"Function properties for (\S+)")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(_PTXAS_PREFIX + r"Used (\d+) registers(.*)$")
_RE_BARRIERS = re.compile(r"used (\d+) barriers")
_RE_SMEM = re.compile(r"(\d+) bytes smem")
_RE_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")


def parse_ptxas_log(text: str) -> dict[str, PtxasInfo]:
    """Per-function resource report from ptxas `-v` output.

    Handles both layouts seen in practice: nvcc/ptxas (`    0 bytes stack frame, ...` indented)
    and NVRTC's program log (`ptxas         .     0 bytes stack frame, ...`), and tool names such
    as `ptxas-blackwell` in Triton's log. The 'Used N registers' line belongs to the function most
    recently named by 'Compiling entry function' or 'Function properties for'.
    """
    out: dict[str, PtxasInfo] = {}
    current: str | None = None
    for line in text.splitlines():
        if m := _RE_COMPILING.search(line):
            current = m.group(1)
            out.setdefault(current, PtxasInfo()).entry = True
        elif m := _RE_PROPERTIES.search(line):
            current = m.group(1)
            out.setdefault(current, PtxasInfo())
        elif (m := _RE_FRAME.search(line)) and current is not None:
            info = out[current]
            info.stack_bytes, info.spill_stores, info.spill_loads = (int(g) for g in m.groups())
        elif (m := _RE_USED.search(line)) and current is not None:
            info = out[current]
            info.registers = int(m.group(1))
            rest = m.group(2)
            if b := _RE_BARRIERS.search(rest):
                info.barriers = int(b.group(1))
            if s := _RE_SMEM.search(rest):
                info.smem_bytes = int(s.group(1))
            info.cmem_bytes = {int(bank): int(n) for n, bank in _RE_CMEM.findall(rest)}
    return out


# ----------------------------------------------------------------------------- cuobjdump -res-usage


@dataclass
class ResUsage:
    """`cuobjdump -res-usage` for one function of a cubin (bytes, except registers).

    SHARED includes the 1 KB per block that sm_80+ reserves for the system, so it exceeds
    ptxas's 'smem' by 1024 there; LOCAL is the per-thread local memory (stack frame)."""

    registers: int = 0
    stack: int = 0
    shared: int = 0
    local: int = 0
    constant: dict[int, int] = field(default_factory=dict)


SYSTEM_SMEM_BYTES = 1024
"""Shared memory per block that sm_80 and later reserve for the system (in ResUsage.shared)."""

_RE_RES_FUNC = re.compile(r"^\s*Function\s+(\S+?):\s*$")
_RE_RES_FIELD = re.compile(r"([A-Z]+)(?:\[(\d+)\])?:(\d+)")


def parse_res_usage(text: str) -> dict[str, ResUsage]:
    """Per-function resources from `cuobjdump -res-usage` output."""
    out: dict[str, ResUsage] = {}
    current: str | None = None
    for line in text.splitlines():
        if m := _RE_RES_FUNC.match(line):
            current = m.group(1)
            out[current] = ResUsage()
            continue
        if current is None or "REG:" not in line:
            continue
        usage = out[current]
        for key, bank, value in _RE_RES_FIELD.findall(line):
            if key == "REG":
                usage.registers = int(value)
            elif key == "STACK":
                usage.stack = int(value)
            elif key == "SHARED":
                usage.shared = int(value)
            elif key == "LOCAL":
                usage.local = int(value)
            elif key == "CONSTANT":
                usage.constant[int(bank or 0)] = int(value)
        current = None
    return out


# ----------------------------------------------------------------------------- PTX


@dataclass
class PtxCounts:
    """Static instruction counts in one PTX function."""

    entry: bool = False
    ld_global: Counter[int] = field(default_factory=Counter)
    """`ld.global*` instructions by access width in bits (32 for .f32, 128 for .v4.f32 ...)."""
    st_global: Counter[int] = field(default_factory=Counter)
    """`st.global*` instructions by access width in bits."""
    ld_global_nc: int = 0
    """`ld.global.nc*` (read-only data cache) loads, also counted in ld_global."""
    barriers: int = 0
    """CTA barriers: `bar.sync`, `barrier.sync`, `bar.arrive`, `bar.red` (not `bar.warp.sync`)."""
    shuffles: int = 0
    """`shfl.*` instructions."""


_RE_PTX_FUNC = re.compile(r"^[ \t]*(?:\.(?:visible|weak|extern)[ \t]+)*(\.(?:entry|func))\b", re.M)
_RE_PTX_NAME = re.compile(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$]*)")
_RE_LINE_DIRECTIVE = re.compile(r"^[ \t]*\.(?:loc|file)\b[^\n]*$", re.M)
_RE_LABEL = re.compile(r"^(?:[$%]?[\w$]+:\s*)+")
_RE_PRED = re.compile(r"^@!?%?[\w$]+\s+")
_RE_BARRIER = re.compile(r"^(?:bar|barrier)(?:\.cta)?\.(?:sync|arrive|red)\b")
_RE_PTX_TYPE = re.compile(r"(?:b|f|s|u|bf)(8|16|32|64|128)")


def ptx_access_bits(opcode: str) -> int:
    """Width in bits of a PTX load/store, e.g. 'ld.global.nc.v4.f32' -> 128,
    'st.global.b32' -> 32, 'ld.global.v2.f64' -> 128, 'ld.global.u8' -> 8."""
    parts = opcode.split(".")
    lanes = 1
    for part in parts:
        if re.fullmatch(r"v\d+", part):
            lanes = int(part[1:])
    type_match = _RE_PTX_TYPE.fullmatch(parts[-1])
    return lanes * int(type_match.group(1)) if type_match else 0


def _strip_ptx_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _ptx_functions(text: str) -> list[tuple[str, bool, str]]:
    """(name, is_entry, body) of each PTX function with a body (prototypes are skipped)."""
    out: list[tuple[str, bool, str]] = []
    for m in _RE_PTX_FUNC.finditer(text):
        name_match = _RE_PTX_NAME.match(text, m.start(1))
        if not name_match:
            continue
        i, depth = name_match.end(), 0
        while i < len(text) and not (depth == 0 and text[i] in "{;"):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        if i >= len(text) or text[i] == ";":
            continue  # a prototype
        start, depth = i, 0
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        out.append((name_match.group(1), m.group(1) == ".entry", text[start + 1:i - 1]))
    return out


def ptx_opcodes(body: str) -> list[str]:
    """Opcodes of the instructions in a PTX function body, in order: statements split at ';',
    with scope braces, labels, guard predicates and directives (`.reg`, `.loc`, ...) dropped."""
    body = _RE_LINE_DIRECTIVE.sub("", body)  # .loc/.file lines carry no ';'
    opcodes: list[str] = []
    for stmt in body.split(";"):
        stmt = stmt.strip()
        while True:  # '}' closing a scope, '{' opening one, and labels may precede an instruction
            stripped = _RE_LABEL.sub("", stmt.lstrip("{} \t\n"))
            if stripped == stmt:
                break
            stmt = stripped
        stmt = _RE_PRED.sub("", stmt)
        if not stmt or stmt.startswith("."):
            continue
        opcodes.append(stmt.split()[0])
    return opcodes


def parse_ptx(text: str) -> dict[str, PtxCounts]:
    """Per-function static counts of global loads/stores by width, `.nc` loads, barriers and
    shuffles, for every `.entry` and `.func` with a body."""
    out: dict[str, PtxCounts] = {}
    for name, is_entry, body in _ptx_functions(_strip_ptx_comments(text)):
        counts = PtxCounts(entry=is_entry)
        for op in ptx_opcodes(body):
            if op.startswith("ld.global"):
                counts.ld_global[ptx_access_bits(op)] += 1
                counts.ld_global_nc += "nc" in op.split(".")
            elif op.startswith("st.global"):
                counts.st_global[ptx_access_bits(op)] += 1
            elif _RE_BARRIER.match(op):
                counts.barriers += 1
            elif op.startswith("shfl."):
                counts.shuffles += 1
        out[name] = counts
    return out


# ----------------------------------------------------------------------------- SASS


@dataclass
class SassCounts:
    """Static instruction counts in one SASS function."""

    ldg: Counter[int] = field(default_factory=Counter)
    """LDG (global load) instructions by width in bits: LDG.E.128 -> 128, LDG.E -> 32."""
    stg: Counter[int] = field(default_factory=Counter)
    """STG (global store) instructions by width in bits."""
    bar: int = 0
    """BAR.* (CTA barrier) instructions."""
    shfl: int = 0
    ldl: int = 0
    """LDL (local-memory load: spills or a stack array)."""
    stl: int = 0
    """STL (local-memory store)."""
    ldl_bytes: int = 0
    """Bytes the LDL instructions read, one access each (LDL.64 -> 8)."""
    stl_bytes: int = 0
    """Bytes the STL instructions write, one access each."""
    lds: int = 0
    sts: int = 0
    instructions: int = 0
    """All instructions, NOPs and the final self-branch included."""

    @property
    def local(self) -> int:
        """LDL + STL: local-memory instructions (0 for a kernel whose arrays stay in registers)."""
        return self.ldl + self.stl


_RE_SASS_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_RE_NVDISASM_FUNC = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
_RE_SASS_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_RE_SASS_PRED = re.compile(r"^@!?U?P(?:T|\d+)\s+")
_SASS_ROOTS = {"LDG": "ldg", "STG": "stg", "BAR": "bar", "SHFL": "shfl", "LDL": "ldl",
               "STL": "stl", "LDS": "lds", "STS": "sts"}


def sass_access_bits(opcode: str) -> int:
    """Width in bits of a SASS memory instruction: 'LDG.E.128.CONSTANT' -> 128, 'LDG.E' -> 32,
    'STG.E.64' -> 64, 'LDG.E.U8' -> 8, 'LDG.E.LTC128B.128' -> 128 (cache hints are ignored)."""
    bits = 32
    for part in opcode.split(".")[1:]:
        if part in ("64", "128", "256"):
            bits = int(part)
        elif part in ("U8", "S8"):
            bits = 8
        elif part in ("U16", "S16"):
            bits = 16
    return bits


def sass_opcodes(text: str) -> dict[str, list[str]]:
    """Opcodes (guard predicate dropped) of each function in `cuobjdump -sass` output (functions
    headed 'Function : X') or `nvdisasm` output (functions in '.section .text.X')."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if m := (_RE_SASS_FUNC.match(line) or _RE_NVDISASM_FUNC.match(line)):
            current = out.setdefault(m.group(1), [])
            continue
        m = _RE_SASS_INSN.search(line)
        if current is None or not m:
            continue
        insn = _RE_SASS_PRED.sub("", m.group(1).strip())
        if insn:
            current.append(insn.split()[0])
    return out


def parse_sass(text: str) -> dict[str, SassCounts]:
    """Per-function static SASS counts (see `sass_opcodes` for the accepted formats)."""
    out: dict[str, SassCounts] = {}
    for name, opcodes in sass_opcodes(text).items():
        counts = SassCounts(instructions=len(opcodes))
        for opcode in opcodes:
            attr = _SASS_ROOTS.get(opcode.split(".")[0])
            if attr in ("ldg", "stg"):
                getattr(counts, attr)[sass_access_bits(opcode)] += 1
                continue
            if attr in ("ldl", "stl"):
                setattr(counts, f"{attr}_bytes", getattr(counts, f"{attr}_bytes") + sass_access_bits(opcode) // 8)
            if attr is not None:
                setattr(counts, attr, getattr(counts, attr) + 1)
        out[name] = counts
    return out


def ptx_code(ptx: str) -> str:
    """A PTX text without its debug information (the `.file` lines and the `.debug_*` sections,
    which hold the source's path and lengths that follow from it): the code, whichever path of the
    same source compiled it (Triton's cache hands one process the kernel another copy of the tree
    compiled)."""
    code = []
    for line in ptx.splitlines():
        if line.lstrip().startswith(".section") and ".debug_" in line:
            break
        if not line.lstrip().startswith(".file"):
            code.append(line)
    return "\n".join(code)
