"""Every headline line of the field note, the issue comment and the page, derived from summary.json
alone: the flag count and each flag, each claim with the verdict a reader sees (and 'not ranked'
with its reason, and the cross-check's distrust, wherever a claim is printed), and the counts.

The lines are rebuilt here from the summary's values with the reports' own number formats, so a
report line that says anything the summary does not (a flag the count leaves out, a verdict the
controls do not justify, an unmarked distrusted kernel time) fails. Run on a rendered namespace
with every kind of headline (a control above its band, a failed check, a disturbed group, a
cross-check disagreement) and on every committed namespace whose summary carries a headline (the
page, which is not committed, rendered from the tables for the newest full and resolution run)."""

from __future__ import annotations

import html.parser
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_report import NS, SHAPES, build_namespace, small_config

from harness import ROOT, namespaces
from harness.io import write_csv
from harness.report import render as report
from harness.report import html as html_page
from harness.report import safe, summary
from harness.tables import flags as flag_checks
from harness.tables.phrases import in_parentheses


def n2(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.2f}"


def ratio(c: dict[str, Any]) -> str:
    if c["ratio"] is None:
        return "n/a"
    span = f" [{c['lo']:,.3f}, {c['hi']:,.3f}]" if c["lo"] is not None and c["hi"] is not None else ""
    return f"{c['ratio']:,.3f}{span}"


def md(text: str) -> str:
    return safe.md_text(text.replace("->", "→"))


class _Text(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def page_text(page: str) -> str:
    p = _Text()
    p.feed(page[page.index("<body"):])
    return " ".join("".join(p.parts).split())


DENIALS = (("Control above its band: ", "no control above its band"), ("Counters ", "no counters missing"),
           ("Measured on ", "no group measured on two GPUs"), ("Check failed: ", "no failed check"),
           ("Disturbed capture: ", "no disturbed capture"),
           ("Drift not bounded: ", "drift bounded by our unchanged kernels"),
           ("Cross-check: ", "graph replay agreeing with the captures"))
"""Each flag's first words and the clean clause it denies, written out here rather than read from
harness.tables.flags: an oracle, which the test below holds to cover every check there."""


def test_every_check_has_its_denial_here() -> None:
    """A check added to flags.CHECKS is covered by the denial test only once its flag's first words
    are in DENIALS: fail until they are."""
    assert {c.clean for c in flag_checks.CHECKS} <= {clause for _, clause in DENIALS}


def expected(s: dict[str, Any]) -> dict[str, list[str]]:
    """The headline lines of each report, from the summary alone."""
    flags, claims, counts = s["flags"], s["claims"], s["counts"]
    said = f": {', '.join(s['checked'])}" if s["checked"] else ""
    comment = [f"**Flags** ({len(flags)}):" if flags else f"**No flags**{said}."]
    comment += [f"- {md(f)}" for f in flags]
    note = [f"- {md(f)}" for f in flags] or [f"None{said}."]
    page = list(flags) or [f"None{said}."]
    # what a flag denies is never among what the run says it checked and found clean
    for prefix, clause in DENIALS:
        if any(f.startswith(prefix) for f in flags):
            assert clause not in s["checked"], (prefix, s["checked"])
    if any(f.startswith("Known answers: ") for f in flags):
        assert not any(c.startswith("no known answer wrong") for c in s["checked"]), s["checked"]
    for c in claims:
        shape = f"{c['shape']} (default)" if c["default"] else c["shape"]
        cell = c["verdict"]
        if c["verdict"] == summary.NOT_RANKED:
            assert c["rankable"] is False and c["reason"], c
            cell += f" {md(in_parentheses(c['reason']))}"  # its own parentheses nested as brackets
        elif c["distrusted"]:
            cell += f" ({listing(c['distrusted'])} distrusted by the cross-check)"
        comment.append(f"| {md(c['op'])} | {md(shape)} | {n2(c['ours_us'])} | {n2(c['control_us'])} | {n2(c['library_us'])} "
                       f"| {ratio(c)} | {cell} |")
        # the claim at each shape, in the operation's section of the note
        if c["verdict"] in summary.VERDICTS:
            recorded = f' (recorded as "{c["verdict_recorded"]}")' if c["verdict_recorded"] != c["verdict"] else ""
            each = (f"- {md(shape)}: ours {n2(c['ours_us'])} µs, control {n2(c['control_us'])} µs, {c['library']} "
                    f"{n2(c['library_us'])} µs; {c['ours']}/{c['control']} {ratio(c)}, **{c['verdict']}**{recorded}.")
            if c["disturbed"]:
                each += " NVML flagged captures at this shape (see the flags)."
            if c["distrusted"]:
                each += f" The cross-check distrusts the kernel time of {listing(c['distrusted'])} here (see the flags)."
            each += replayed(c)
            note.append(each)
        else:
            note.append(f"- {md(shape)}: {md(c['note'])}")
        if not c["default"]:
            continue
        if c["verdict"] in summary.VERDICTS:
            text = (f"ours {n2(c['ours_us'])} µs against the control's {n2(c['control_us'])} µs, {c['ours']}/{c['control']} "
                    f"{ratio(c)}, ")
            tail = "."
            if c["disturbed"]:
                tail += " NVML flagged captures at this shape (see the flags)."
            if c["distrusted"]:
                tail += f" The cross-check distrusts the kernel time of {listing(c['distrusted'])} here (see the flags)."
            tail += replayed(c)
            note.append(f"- **{md(c['op'])} {md(c['shape'])}**: {text}**{c['verdict']}**{tail}")
            page.append(f"{c['op']} {c['shape']}: {text}{c['verdict']}{tail}")
        else:
            note.append(f"- **{md(c['op'])} {md(c['shape'])}**: {md(c['note'])}")
            page.append(f"{c['op']} {c['shape']}: {c['note'].replace('->', '→')}")
    a = counts["all"]
    line = f"all {a['faster']} faster, {a['slower']} slower, {a['same']} same, {a[stats_cant()]} can't tell"
    if a["not ranked"]:
        line += f", {a['not ranked']} not ranked"
    comment.append(line)
    note.append(f"| all | {a['shapes']} | " + " | ".join(str(a[k]) for k in report.COUNT_KEYS) + " |")
    # the claims agree with the rows: a ratio over the control carries the claim's verdict
    for c in claims:
        row = next((r for r in s["rows"] if (r["op"], r["shape"], r["impl"]) == (c["op"], c["shape"], c["ours"])), None)
        got = next((x for x in (row or {}).get("ratios", []) if x["role"] == "control"), None)
        if got is not None and c["verdict"] in (*summary.VERDICTS, summary.NOT_RANKED):
            assert got["verdict"] == c["verdict"], (c, got)
    # the counts are the claims'
    for key in report.COUNT_KEYS:
        assert a[key] == sum(1 for c in claims if c["verdict"] == key)
    # the disturbed captures and the cross-check's disagreements each have their flag
    if s["disturbed"]:
        assert any(f.startswith("Disturbed capture: ") for f in flags)
    if s["cross_check_disagree"]:
        flag = next(f for f in flags if f.startswith("Cross-check: "))
        assert flag.startswith(f"Cross-check: {len(s['cross_check_disagree'])} of ")
        for d in s["cross_check_disagree"]:
            assert f"{d['op']} {d['shape']} " in flag
            claim = next((c for c in claims if (c["op"], c["shape"]) == (d["op"], d["shape"])), None)
            if claim is not None and d["impl"] in (claim["ours"], claim["control"], claim["library"]):
                assert d["impl"] in claim["distrusted"]
    return {"comment": comment, "note": note, "page": page}


def replayed(c: dict[str, Any]) -> str:
    """The clause a claim line ends with where its replay ratio parts from its kernel-time one."""
    if not c.get("replay_differs"):
        return ""
    assert c["replay_ratio"] is not None, c
    return (f" By graph replay a call (the gaps between kernels counted) {c['ours']}/{c['control']} is "
            f"{c['replay_ratio']:.3f}: see the cross-check against graph replay.")


def listing(names: list[str]) -> str:
    """Names as an English list: 'a', 'a and b', 'a, b and c' (the reports' own wording)."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def stats_cant() -> str:
    return summary.VERDICTS[3]


def check(s: dict[str, Any], note: str, comment: str, page: str | None) -> None:
    want = expected(s)
    note_lines, comment_lines = note.splitlines(), comment.splitlines()
    for line in want["comment"]:
        assert any(x == line or (line.startswith("all ") and line in x) for x in comment_lines), line
    for line in want["note"]:
        assert line in note_lines, line
    if page is None:
        return
    text = page_text(page)
    for line in want["page"]:
        assert " ".join(line.split()) in text, line


def test_every_headline_line_comes_from_the_summary(tmp_path: Path) -> None:
    cfg = small_config()
    inputs = build_namespace(tmp_path, cfg, failed={("layernorm", SHAPES[1], "torch"): "planted"},
                             above=[("layernorm", SHAPES[0])], disturbed=[("layernorm", SHAPES[2])])
    # a cross-check disagreement at a shape that ranks, planted in the table the pipeline wrote
    tables = report.load_tables(inputs)
    cc = tables["cross_check"]
    bad = (cc["shape"] == SHAPES[3]) & (cc["impl"] == "cuda") & (cc["status"] == "ok")
    assert bad.any()
    cc.loc[bad, "agree"] = False
    # and ours 4% slower by replay than by kernel time at every shape: the claims that rank say so
    ours = (cc["impl"] == "cuda") & (cc["status"] == "ok")
    cc.loc[ours, "graph_median_us"] = cc.loc[ours, "graph_median_us"] * 1.04
    write_csv(cc.to_dict("records"), list(cc.columns), inputs["cross_check"])
    out = tmp_path / "report" / NS
    paths = report.output_paths(NS, list(cfg["operations"]), tmp_path / "artifacts", tmp_path / "report")
    report.render_namespace(cfg, inputs, paths)
    s = summary.read(paths["summary"])
    assert {c["verdict"] for c in s["claims"]} >= {"not ranked"}
    assert any(c["distrusted"] == ["cuda"] for c in s["claims"])
    assert any(c["replay_differs"] for c in s["claims"]) and not any(
        c["replay_differs"] for c in s["claims"] if c["verdict"] not in summary.VERDICTS)
    assert "By graph replay a call (the gaps between kernels counted) cuda/triton is " in (out / "field_note.md").read_text()
    check(s, (out / "field_note.md").read_text(), (out / "issue_comment.md").read_text(), (out / "index.html").read_text())


COMMITTED = sorted(p.parent.name for p in (ROOT / "artifacts").glob("*/summary.json")
                   if "claims" in json.loads(p.read_text()))


NEWEST = {str(namespaces.newest(COMMITTED, "h200-ops-")), str(namespaces.newest(COMMITTED, "h200-resolution-"))}
"""The newest committed full run and resolution run: their pages (not committed; rendered from the
tables by python -m harness.report.html) are checked as well."""


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_reports_agree_with_their_summary(name: str, tmp_path: Path) -> None:
    s = summary.read(ROOT / "artifacts" / name / "summary.json")
    rep = ROOT / "report" / name
    page = html_page.render_page(ROOT / "artifacts" / name, tmp_path).read_text() if name in NEWEST else None
    check(s, (rep / "field_note.md").read_text(), (rep / "issue_comment.md").read_text(), page)


@pytest.mark.parametrize("name", COMMITTED)
def test_each_claims_replay_ratio_is_its_cross_check_tables(name: str) -> None:
    """replay_ratio: ours over the control by the cross-check's graph-replay medians at that shape,
    read here from tables/cross_check.csv directly; null where the table did not compare both (with
    a kernel time and a replay each)."""
    s = summary.read(ROOT / "artifacts" / name / "summary.json")
    table = ROOT / "artifacts" / name / "tables" / "cross_check.csv"
    graph: dict[tuple[str, str, str], float] = {}
    kernel: dict[tuple[str, str, str], float] = {}
    if table.is_file():
        import pandas as pd

        cc = pd.read_csv(table, dtype={"op": str, "shape": str, "impl": str})
        for _, r in cc[(cc["status"] == "ok") & cc["kernel_time_us"].notna() & cc["graph_median_us"].notna()].iterrows():
            graph[(r["op"], r["shape"], r["impl"])] = float(r["graph_median_us"])
            kernel[(r["op"], r["shape"], r["impl"])] = float(r["kernel_time_us"])
    margin = float((s.get("interval") or {}).get("margin") or 0.01)
    for c in s["claims"]:
        a, b = (c["op"], c["shape"], c["ours"]), (c["op"], c["shape"], c["control"])
        ours, ctl = graph.get(a), graph.get(b)
        if ours is None or not ctl:
            assert c["replay_ratio"] is None and not c.get("replay_differs"), c
            continue
        assert c["replay_ratio"] == pytest.approx(ours / ctl, abs=1e-6), c
        if "replay_differs" in c:  # summaries written before it lack it
            parts = abs((ours / ctl) / (kernel[a] / kernel[b]) - 1.0) > margin
            assert c["replay_differs"] == (parts and c["verdict"] in summary.VERDICTS), c


def test_h200_ops_4_says_what_its_tables_say() -> None:
    """The reviewer's findings on h200-ops-4, as its summary now has them."""
    if "h200-ops-4" not in COMMITTED:
        pytest.skip("h200-ops-4's summary has not been re-derived with a headline")
    s = summary.read(ROOT / "artifacts" / "h200-ops-4" / "summary.json")
    by = {(c["op"], c["shape"]): c for c in s["claims"]}
    mm = by[("matmul", "4096x4096x4096")]
    assert mm["verdict"] == "not ranked" and "NVML flagged the captures there" in mm["reason"]
    assert "power cap" in mm["reason"] and "band" not in mm["note"]
    ln = by[("layernorm", "1024x2048")]
    assert set(ln["distrusted"]) >= {"cuda", "triton"}
    assert len(s["flags"]) == sum(1 for f in s["flags"] if f)
