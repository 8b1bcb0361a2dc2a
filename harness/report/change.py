"""What the reports say of the change itself: each kernel of ours against itself at a baseline
revision (--config baseline=<revision>), measured in the same session and groups (change.csv,
harness.tables.derive.CHANGE_COLUMNS). With a baseline, the field note, the issue comment and the
page open with it, and summary.json carries the same rows under `change`.

`context` is what the templates print (numbers formatted here, strings escaped by the templates);
`rows` is what summary.json holds (numbers as numbers). Both come from the one table; the
control's state at each shape is the controls table's `status` there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness import ops
from harness.report import resolution
from harness.report.words import number, ratio_text, records, text, us_text
from harness.tables import binaries, stats


def verdict(value: Any) -> str | None:
    """A verdict cell as one of the four verdicts, or None."""
    said = text(value)
    return said if said in stats.VERDICTS else None


def _control_states(controls: Any) -> dict[tuple[str, str], str]:
    return {(str(r.get("op")), str(r.get("shape"))): str(r.get("status") or "")
            for r in records(controls)}


def rows(change: Any) -> list[dict[str, Any]]:
    """summary.json's `change`: one object per (revision, op, shape, impl), in the table's order."""
    out = []
    for r in records(change):
        out.append({"revision": text(r.get("revision")), "commit": text(r.get("commit")), "op": text(r.get("op")),
                    "shape": text(r.get("shape")), "impl": text(r.get("impl")),
                    "current_us": number(r.get("current_us")), "baseline_us": number(r.get("baseline_us")),
                    "ratio": number(r.get("ratio")), "lo": number(r.get("ratio_lo")), "hi": number(r.get("ratio_hi")),
                    "verdict": verdict(r.get("verdict")), "dispatch": dispatch(r.get("dispatch"))})
    return out


OWN, THIS = ops.OWN_DISPATCH, ops.THIS_DISPATCH
"""change.csv's `dispatch`: whose dispatch chose and launched a revision's kernels."""


def dispatch(value: Any) -> str | None:
    """A dispatch cell as OWN or THIS, or None (a namespace measured before the table said)."""
    said = text(value)
    return said if said in (OWN, THIS) else None


def dispatch_sentence(by_op: Mapping[str, str | None]) -> str:
    """What the reports say of whose dispatch chose and launched a revision's kernels, from each
    operation's `dispatch` (op -> OWN, THIS or None): '' where no operation's is known."""
    this = [op for op, d in by_op.items() if d == THIS]
    if this:
        return (f"At {', '.join(this)} this checkout's dispatch chose and launched the revision's kernels (its "
                "sources came without a dispatch of their own), so a change of the dispatch there is not in these rows.")
    if by_op and all(d == OWN for d in by_op.values()):
        files = ", ".join(f"harness/ops/{op}/kernels.py" for op in by_op)
        return (f"The revision's kernels ran as its own dispatch chose and launched them ({files} at that commit), "
                "so a change of which kernel serves a shape is in these rows.")
    return ""


def _unchanged(code: binaries.Serving, r: Mapping[str, Any]) -> bool | None:
    """Whether the kernels serving row `r`'s shape run its revision's code (their SASS, instruction
    for instruction), or None where the census does not say."""
    return binaries.same(code, str(r.get("op")), str(r.get("shape")), str(r.get("impl")),
                         f"{r.get('impl')}@{r.get('revision')}")


def aa_pairs(change: Any, code: binaries.Serving | None = None) -> list[dict[str, Any]]:
    """The rows the change left as they were (`_unchanged`, by `code`: the census's code map,
    binaries.serving), as known answers in the form of harness.report.resolution's rows (role
    'same binary', "same" expected, the variant named impl@revision), so that the session's flag
    (resolution.flags) names those that came out faster or slower beside the run's own A/A pairs."""
    return [{"op": str(r.get("op")), "shape": str(r.get("shape")), "variant": f"{r.get('impl')}@{r.get('revision')}",
             "role": resolution.SAME_BINARY, "verdict": verdict(r.get("verdict")), "ratio": number(r.get("ratio")),
             "lo": number(r.get("ratio_lo")), "hi": number(r.get("ratio_hi"))}
            for r in records(change) if _unchanged(code or {}, r) is True]


def _by(frame: Any, keys: tuple[str, ...]) -> dict[tuple[str, ...], dict[str, Any]]:
    return {tuple(str(r.get(k)) for k in keys): r for r in records(frame)}


def stages(change: Any, kernel_time: Any, span: Any, control: str, head: str | None,
           order: Mapping[str, int] | None = None, code: binaries.Serving | None = None) -> list[dict[str, Any]]:
    """With two baselines or more, the stage table: per (op, shape, impl of ours), one row per
    build, oldest first and this checkout last: the revision (and its commit and date), its kernel
    time with its interval, its event span, the control's kernel time in the same session (one
    session: the same for every build), and `binary`: for a revision's build "this checkout's"
    where `code` (the census's code map, binaries.serving) shows the kernels serving the shape run
    this checkout's code (their SASS, instruction for instruction), "its own" where they differ, "" where the census does not say
    and for this checkout's own row. Empty with fewer than two baselines."""
    found = records(change)
    labels = list(dict.fromkeys(str(r.get("revision")) for r in found))
    if len(labels) < 2:
        return []
    kt, sp = _by(kernel_time, ("op", "shape", "impl")), _by(span, ("op", "shape", "impl"))
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in found:
        op, shape, impl, label = str(r.get("op")), str(r.get("shape")), str(r.get("impl")), str(r.get("revision"))
        entry = out.setdefault((op, shape, impl), {"op": op, "shape": shape, "impl": impl, "builds": []})
        entry["builds"].append({"build": label, "commit": text(r.get("commit")) or "unknown",
                                "date": text(r.get("commit_date")) or "", "impl": f"{impl}@{label}"})
    rank = order or {}
    result = []
    for (op, shape, impl), entry in out.items():
        builds = sorted(entry["builds"], key=lambda b: (b["date"] == "", b["date"]))  # undated ones after the dated
        builds.append({"build": "this checkout", "commit": head or "unknown", "date": "", "impl": impl})
        ctl = kt.get((op, shape, control)) or {}
        for b in builds:
            k, s = kt.get((op, shape, b["impl"])) or {}, sp.get((op, shape, b["impl"])) or {}
            b["kernel"] = us_text(k.get("kernel_time_us"), k.get("kernel_time_lo_us"), k.get("kernel_time_hi_us"))
            b["span"] = us_text(s.get("span_median_us"))
            b["control"] = us_text(ctl.get("kernel_time_us"), ctl.get("kernel_time_lo_us"), ctl.get("kernel_time_hi_us"))
            same = None if b["impl"] == impl else binaries.same(code or {}, op, shape, impl, b["impl"])
            b["binary"] = "" if same is None else "this checkout's" if same else "its own"
        result.append({**entry, "builds": builds})
    result.sort(key=lambda e: (rank.get(e["op"], len(rank)), e["op"]))
    return result


def context(change: Any, controls: Any = None, order: Mapping[str, int] | None = None,
            code: binaries.Serving | None = None) -> dict[str, Any] | None:
    """The templates' `change`: None without a baseline; else its revisions in the order the
    table first names them, each with its commit and rows (op, shape, impl, current and baseline
    kernel time, ratio with its interval, verdict, the control's state at that shape, and `binary`:
    'unchanged' where `code` (the census's code map, binaries.serving) shows the kernels serving
    the shape run the revision's code (their SASS, instruction for instruction), so that the row is
    an A/A pair and "same" the right verdict, 'changed', or None where the census does not say),
    the operations in `order` (name -> position), the counts of each verdict, and per revision `dispatch`
    (dispatch_sentence: whose dispatch chose its kernels, '' where the table does not say), `unchanged` (how many
    rows are A/A pairs), `unchanged_wrong` (how many of those came out faster or slower: a bias of
    the session, which the flag names too, through `aa_pairs`) and `binaries_known`."""
    found = records(change)
    if not found:
        return None
    states = _control_states(controls)
    revisions: dict[str, dict[str, Any]] = {}
    for r in found:
        label = str(r.get("revision"))
        rev = revisions.setdefault(label, {"label": label, "commit": text(r.get("commit")) or "unknown", "rows": [],
                                           "counts": {v: 0 for v in stats.VERDICTS}, "unchanged": 0,
                                           "unchanged_wrong": 0, "binaries_known": False, "dispatch_by_op": {}})
        rev["dispatch_by_op"].setdefault(str(r.get("op")), dispatch(r.get("dispatch")))
        said = verdict(r.get("verdict"))
        if said is not None:
            rev["counts"][said] += 1
        state = states.get((str(r.get("op")), str(r.get("shape"))))
        same = _unchanged(code or {}, r)
        rev["binaries_known"] = rev["binaries_known"] or same is not None
        rev["unchanged"] += same is True
        rev["unchanged_wrong"] += same is True and said in (stats.FASTER, stats.SLOWER)
        rev["rows"].append({
            "op": str(r.get("op")), "shape": str(r.get("shape")), "impl": str(r.get("impl")),
            "current": us_text(r.get("current_us")), "baseline": us_text(r.get("baseline_us")),
            "ratio": ratio_text(r.get("ratio"), r.get("ratio_lo"), r.get("ratio_hi")),
            "verdict": said or "no verdict",
            "control": state if state else "not judged",
            "binary": None if same is None else "unchanged" if same else "changed",
        })
    rank = order or {}
    for rev in revisions.values():
        rev["rows"].sort(key=lambda row: (rank.get(row["op"], len(rank)), row["op"]))
        rev["dispatch"] = dispatch_sentence(rev.pop("dispatch_by_op"))
    return {"revisions": list(revisions.values()), "labels": list(revisions)}
