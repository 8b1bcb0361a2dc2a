"""The words and numbers a reader of a report sees, in one place: how a table's cell is read (a
missing value, a number, a boolean), how a number is printed (µs, ratios with their intervals,
percentages), and the phrases the reports share (why a pairing is not ranked, the cross-check's
distrust, why a dirty state is unknown). harness/report/render.py, summary.py and figures.py
read and print through these; the trust rules' own notes come from harness/tables/phrases.py."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness.io import row_dicts
from harness.report import safe
from harness.tables import trust
from harness.tables.cells import integer, missing, number, text, truth  # noqa: F401 (words' own vocabulary)
from harness.tables.phrases import in_parentheses, nested

IMPL_ORDER = ["cuda", "triton", "torch", "external"]
IMPL_LABEL = {"cuda": "cuda (ours, CUDA C++)", "triton": "triton (ours, Triton)", "torch": "torch (library)",
              "external": "external (PTX/cubin from another toolchain)"}
OURS = "cuda"
LIBRARY = "torch"

NOT_RANKED = "not ranked"
"""The verdict of a ratio over the control that the controls table does not rank."""


def records(frame: Any) -> list[dict[str, Any]]:
    """A table's rows as dicts, a missing cell as None; [] for no table or an empty one."""
    if frame is None or len(frame) == 0:
        return []
    return [{k: (None if missing(v) else v) for k, v in r.items()} for r in row_dicts(frame)]


NOTEBOOK = "kernels/{op}/notebook.md"
"""An operation's kernel notebook: each variant's prediction and result, and what the evidence says
blocks a target it missed."""

_OP_NAME = re.compile(r"[a-z][a-z0-9_]*")
"""An operation's name as the config allows it: only such a name becomes a link."""


def notebook(op: str) -> dict[str, Any] | None:
    """The notebook of `op`: its `path` from the repository root and its `link` from
    report/<namespace>/, where the reports live; None for a name the config would not allow."""
    if not _OP_NAME.fullmatch(op):
        return None
    path = NOTEBOOK.format(op=op)
    return {"path": path, "link": safe.Trusted("../../" + path)}


def num(value: Any, digits: int = 2) -> str:
    """A number with thousands separators and `digits` decimals; 'n/a' for none."""
    v = number(value)
    return "n/a" if v is None else f"{v:,.{digits}f}"


def md(value: Any) -> str:
    """Text safe inside a markdown table cell (safe.md_cell)."""
    return safe.md_cell(value)


def scaled(value: Any, divisor: float) -> float | None:
    """A table's number over `divisor` (ns to µs, bytes to MB), None where there is none."""
    v = number(value)
    return None if v is None else v / divisor


def pct(fraction: Any, digits: int = 1) -> str:
    v = number(fraction)
    return "n/a" if v is None else f"{v * 100:.{digits}f}%"


def sci(value: Any) -> str:
    v = number(value)
    return "n/a" if v is None else f"{v:.2e}"


def interval(lo: Any, hi: Any, digits: int = 3) -> safe.Trusted:
    """'[lo, hi]', or '' where either end is missing (composed of numbers only, so printed as it is)."""
    a, b = number(lo), number(hi)
    return safe.Trusted("" if a is None or b is None else f"[{a:,.{digits}f}, {b:,.{digits}f}]")


def ratio_text(value: Any, lo: Any = None, hi: Any = None, digits: int = 3) -> safe.Trusted:
    """'0.993 [0.989, 0.997]', '0.993' without an interval, 'n/a' without a ratio."""
    if number(value) is None:
        return safe.Trusted("n/a")
    span = interval(lo, hi, digits)
    return safe.Trusted(f"{num(value, digits)} {span}" if span else num(value, digits))


def us_text(value: Any, lo: Any = None, hi: Any = None) -> safe.Trusted:
    """Microseconds with their interval where the table has one."""
    span = interval(lo, hi, 2)
    return safe.Trusted(f"{num(value)} {span}" if span else num(value))


def sentence(text: Any) -> str:
    """One line ending with exactly one period (a reason a table gives may end with its own)."""
    out = re.sub(r"\s+", " ", safe.plain(text)).strip().rstrip(". ").strip()
    return out + "." if out else ""


def arrows(text: Any) -> str:
    """Prose a table wrote (a trust note, a claim note, a bound's sentence) as a report prints it:
    '->' as an arrow and its parentheses nested (`nested`), tables written before either included."""
    return nested(safe.plain(text)).replace("->", "→")


def yes(value: Any) -> str:
    t = truth(value)
    return "n/a" if t is None else ("yes" if t else "no")


def pct_points(value: Any) -> str:
    v = number(value)
    return "n/a" if v is None else f"{v:.1f}%"


def not_ranked_reason(row: Mapping[str, Any] | None) -> str:
    """Why a controls row ranks nothing, as a clause ('NVML flagged the captures there (...)'), from
    its status, what NVML saw and whether ours and the control shared a GPU: the reason the trust
    rules gave, not the band the control happened to fall in."""
    if not row:
        return "no control judged the captures there"
    status, nvml = safe.plain(row.get("status")), safe.plain(row.get("nvml"))
    flags = trust.flag_clause(row.get("nvml_flags"))
    reasons = []
    if status == "missing":
        reasons.append("the control was not measured there")
    elif status == "under load":
        reasons.append(f"the control came back above its band under load: {flags}" if flags
                       else "the control came back above its band under load")
    elif status in ("above", "outside"):
        reasons.append("the control came back above its band, a suspect capture")
    elif status == "establishing" and nvml != "disturbed":
        reasons.append("the control has no band yet and NVML recorded nothing for its capture")
    if nvml == "disturbed" and status != "under load":
        reasons.append(f"NVML flagged the captures there: {flags}" if flags else "NVML flagged the captures there")
    if truth(row.get("split_gpus")):
        reasons.append("ours and the control ran on different GPUs")
    return trust.and_(reasons) or f"the control's capture is {status or 'not judged'} there"


def disagrees(row: Mapping[str, Any]) -> bool:
    """A cross-check row compared (status ok) whose kernel time disagrees with its graph replay."""
    return row.get("status") == "ok" and truth(row.get("agree")) is not True


def distrust_mark(claim: Mapping[str, Any]) -> str:
    """What a verdict cell carries where the cross-check distrusts a kernel time of the claim."""
    return f" ({claim['distrusted_text']} distrusted by the cross-check)" if claim.get("distrusted") else ""


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def unsampled(row: Mapping[str, Any]) -> bool:
    """A gpu_state row without NVML samples during its capture and without a flag: NVML could not
    be read, so whether the capture was quiet is unknown."""
    return ("during_samples" in row and not number(row.get("during_samples"))
            and truth(row.get("disturbed")) is not True)


def cross_check_flag(cross: Mapping[str, Any]) -> str:
    """The flag line of the kernel times the cross-check distrusts, each (op, shape) named once."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in cross["disagree"]:
        groups.setdefault((safe.plain(r.get("op")), safe.plain(r.get("shape"))), []).append(safe.plain(r.get("impl")))
    where = [f"{op} {shape} {trust.and_(impls)}" for (op, shape), impls in groups.items()]
    return sentence(f"Cross-check: {len(cross['disagree'])} of {cross['compared']} kernel times disagree with their "
                    f"graph replay and should not be trusted until the difference is explained: {'; '.join(where)}")


def dirty_unknown(git: Mapping[str, Any]) -> str:
    """What the header says where the provenance records no dirty state: why it is not recorded."""
    if safe.plain(git.get("source")) == "EVIDENCE_GIT_COMMIT":
        return "uncommitted changes not recorded: the run's copy had no .git and EVIDENCE_GIT_DIRTY was unset"
    return "no git state was recorded, so whether the tree had uncommitted changes is unknown"
