"""Render a namespace's reports from its tables: the field note and the issue comment (markdown),
the page (one self-contained HTML file), the figures and the machine-readable summary.

Every figure in a report comes from a table the pipeline wrote; `build_context` only selects and
formats them (numbers become text here, nothing is estimated), and the templates in
report/templates/ only lay the context out. The markdown and the HTML are rendered from the same
context. Every string that came from a table or a config is escaped where it is printed, by
harness.report.safe: the markdown environment escapes each value a template prints unless the
report composed it (`safe.Trusted`), and the HTML environment autoescapes.

Two generations of tables are read (harness.report.summary): intervals are 95% intervals over
interleaved rounds where the sweep table records a margin, else the min-max
envelope of the launches, and an older table's verdict 'no difference' is counted as can't tell.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.errors import EvidenceError
from harness.io import write_text
from harness.report import change, resolution, targets
from harness.report import figures as figs
from harness.report import safe, summary, trust_context
from harness.report.sections import (_order, _rows, _span_facts, _trust_section, counters_context,
                                     cross_check_context, gpu_groups, gpu_quiet, resolution_context, table,
                                     variants_context)
from harness.report.words import (IMPL_LABEL, IMPL_ORDER, LIBRARY, OURS, arrows, in_parentheses, cross_check_flag, dirty_unknown, disagrees, distrust_mark, interval, md,
                                  not_ranked_reason, num, pct, pct_points, plural, ratio_text, records, scaled, sci, sentence,
                                  unsampled, us_text, yes)
from harness.tables import counters as ctr
from harness.tables import binaries, history, stats, trust, variants
from harness.tables.derive import SWEEP_PAIRS

TEMPLATES = ROOT / "report" / "templates"

READING = "docs/reading-a-report.md"
READING_LINK = "../../" + READING
"""The guide to a report, linked from report/<ns>/ (where the field note and the page are)."""

COMMENT_LIMIT = 65536
"""GitHub's limit on the characters of one issue comment."""

NOT_RANKED = summary.NOT_RANKED
NO_VERDICT = "no verdict"
COUNT_KEYS = (*stats.VERDICTS, NOT_RANKED, NO_VERDICT)


# ------------------------------------------------------------------------------ formatting


def anchor(title: str, taken: set[str] | None = None) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens; with
    `taken`, a repeat gets '-1', '-2' as GitHub numbers them."""
    slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") or "section"
    if taken is None:
        return slug
    out, n = slug, 0
    while out in taken:
        n += 1
        out = f"{slug}-{n}"
    taken.add(out)
    return out


def gpu_label(gpus: Sequence[Mapping[str, Any]]) -> str:
    """'NVIDIA H200', or 'NVIDIA H200 (2 GPUs)' for a namespace whose jobs ran on two of them."""
    model = history.gpu_model(gpus)
    if model is None:
        return "unknown GPU"
    uuids = {str(g.get("uuid")) for g in gpus}
    return f"{model} ({len(uuids)} GPUs)" if len(uuids) > 1 else model


# ------------------------------------------------------------------------------ claims and counts


def _control_of(cfg: Mapping[str, Any]) -> str:
    return str((cfg.get("trust") or {}).get("control") or "triton")


def _shape_claim(op: str, shape: str, row: Mapping[str, Any] | None, tctx: Mapping[str, Any], judged: bool,
                 control: str, checks: list[dict[str, Any]], disturbed: bool,
                 distrusted: Sequence[str] = ()) -> dict[str, Any]:
    """What a report says of ours against the control at one shape. `kind` 'ratio': the ratio
    with its interval and verdict (`disturbed` where NVML flagged captures there though the
    control's row ranks it, as tables from before NVML entered the ranking do); 'note': the
    control is not rankable there, `reason` says why and `note` is the trust module's claim note;
    'none': no verdict, and `note` says why (no ratio, or a table that records none). `shown` is
    the verdict every reader and program sees: the ratio's verdict, 'not ranked' or 'no verdict'.
    `distrusted`: the implementations of this claim whose kernel time at this shape disagrees with
    its graph replay (the cross-check), marked wherever the claim is printed."""
    key = f"{op} {shape}"
    r = row or {}
    name = f"{OURS}_over_{control}"
    claim: dict[str, Any] = {
        "op": op, "shape": shape, "ours": num(r.get(f"{OURS}_us")), "control": num(r.get(f"{control}_us")),
        "library": num(r.get(f"{LIBRARY}_us")), "ratio_name": f"{OURS}/{control}",
        "ours_us": summary.number(r.get(f"{OURS}_us")), "control_us": summary.number(r.get(f"{control}_us")),
        "library_us": summary.number(r.get(f"{LIBRARY}_us")),
        "ratio": ratio_text(r.get(name), r.get(f"{name}_lo"), r.get(f"{name}_hi")),
        "ratio_value": summary.number(r.get(name)), "lo": summary.number(r.get(f"{name}_lo")),
        "hi": summary.number(r.get(f"{name}_hi")),
        "verdict": summary.verdict(r.get(f"{OURS}_vs_{control}")),
        "recorded": summary.text(r.get(f"{OURS}_vs_{control}")),
        "rankable": tctx["rankable"].get(key, False) if judged else None, "note": "", "kind": "ratio",
        "disturbed": disturbed, "reason": "", "distrusted": list(distrusted),
        "distrusted_text": trust.and_(list(distrusted)),
    }
    failed = [c for c in checks if summary.truth(c.get("passed")) is False and c.get("impl") in (OURS, control)]
    if claim["rankable"] is False:
        controls_row = tctx["by_key"].get(key)
        note = safe.plain((controls_row or {}).get("claim_note"))
        if not note and controls_row is not None:
            lo, hi = controls_row.get("band_lo_us"), controls_row.get("band_hi_us")
            band = f"the control's band of {num(lo)}–{num(hi)} µs" if summary.number(lo) is not None else "no band yet"
            note = (f"Ours ({OURS}) at {claim['ours']} µs against {band}; no ranking follows from this pairing, "
                    f"because the control's capture is {controls_row.get('status') or 'not judged'} there.")
        elif not note:
            note = f"No control judged the captures at {key}, so no ranking follows there."
        claim.update(kind="note", note=arrows(note), reason=not_ranked_reason(controls_row))
    elif claim["ratio_value"] is None or claim["verdict"] is None:
        if failed:
            why = "; ".join(f"{c['impl']}'s check failed" for c in failed)
            note = f"No ratio: {why} at this shape, so it was neither captured nor timed."
        elif summary.text(r.get(f"{OURS}_vs_{control}")) == "different GPUs" or (summary.number(r.get("gpus")) or 1) > 1:
            note = "No ratio: ours and the control were captured on different GPUs, and kernel times compare only within one GPU."
        elif claim["ratio_value"] is not None:
            note = (f"ours {claim['ours']} µs against the control's {claim['control']} µs, {claim['ratio_name']} "
                    f"{claim['ratio']}; no verdict, as this table records no interval of the ratio.")
        else:
            note = f"No ratio: the comparison lacks a {OURS} or {control} kernel time at this shape."
        claim.update(kind="none", note=note)
    claim["shown"] = claim["verdict"] if claim["kind"] == "ratio" else NOT_RANKED if claim["kind"] == "note" else NO_VERDICT
    return claim


def _count(claims: list[dict[str, Any]]) -> dict[str, int]:
    out = {k: 0 for k in COUNT_KEYS}
    for c in claims:
        if c["rankable"] is False:
            out[NOT_RANKED] += 1
        elif c["kind"] == "none":
            out[NO_VERDICT] += 1
        else:
            out[c["verdict"]] += 1
    out["shapes"] = len(claims)
    return out


def _counts_text(counts: Mapping[str, int]) -> str:
    parts = [f"{counts[v]} {v}" for v in stats.VERDICTS]
    parts += [f"{counts[k]} {k}" for k in (NOT_RANKED, NO_VERDICT) if counts[k]]
    return ", ".join(parts)


# ------------------------------------------------------------------------------ one operation


def _op_context(cfg: Mapping[str, Any], op: str, spec: Mapping[str, Any], tables: Mapping[str, Any],
                tctx: Mapping[str, Any], judged: bool, control: str, figure: str | None) -> dict[str, Any]:
    sweep, kt, detail, span, check, census = (tables.get(k) for k in
                                              ("sweep", "kernel_time", "kernel_time_detail", "span", "check", "census"))
    shapes = list(dict.fromkeys([str(spec["default"]), *(str(s) for s in spec.get("sweep", []))]))
    default = shapes[0]
    sweep_rows = {str(r["shape"]): r for r in _rows(sweep, op=op)}
    op_checks = _order(_rows(check, op=op), shapes)
    flagged = {str(r.get("shape")) for r in _rows(tables.get("gpu_state"), op=op) if summary.truth(r.get("disturbed"))}
    distrust = [r for r in _rows(tables.get("cross_check"), op=op) if disagrees(r)]
    claim_impls = (OURS, control, LIBRARY)
    claims = [_shape_claim(op, s, sweep_rows.get(s), tctx, judged, control,
                           [c for c in op_checks if str(c.get("shape")) == s], s in flagged,
                           [i for i in claim_impls if any(str(r.get("shape")) == s and str(r.get("impl")) == i
                                                          for r in distrust)]) for s in shapes]
    counts = _count(claims)
    op_kt = _order(_rows(kt, op=op), shapes)
    base_impls = [i for i in IMPL_ORDER if any(summary.number(r.get(f"{i}_us")) is not None for r in sweep_rows.values())
                  or any(str(r.get("impl")) == i for r in op_kt)]
    ratios = [(a, b) for a, b in SWEEP_PAIRS if a in base_impls and b in base_impls]

    # shape sweep
    cols = [("shape", "l")] + [(f"{i} µs", "r") for i in base_impls]
    for a, b in ratios:
        cols.append((f"{a}/{b}", "r"))
        if (a, b) == (OURS, control):
            cols.append(("verdict", "l"))
    rows = []
    for c in claims:
        r = sweep_rows.get(c["shape"], {})
        row = [c["shape"]] + [num(r.get(f"{i}_us")) for i in base_impls]
        for a, b in ratios:
            name = f"{a}_over_{b}"
            row.append(ratio_text(r.get(name), r.get(f"{name}_lo"), r.get(f"{name}_hi")))
            if (a, b) == (OURS, control):
                if c["rankable"] is False:
                    row.append(f"{NOT_RANKED} {in_parentheses(c['reason'])}")
                elif c["verdict"] is None:
                    row.append(c["recorded"] or "n/a")
                else:
                    row.append(c["verdict"] + (f" (recorded: {c['recorded']})" if c["recorded"] != c["verdict"] else "")
                               + distrust_mark(c))
        rows.append(row)
    sweep_table = table(cols, rows)

    # distance from the ceilings
    rate_rows = []
    for r in op_kt:
        rate_rows.append([r.get("shape"), r.get("impl"), num(scaled(r.get("bytes_moved"), 1e6), 1),
                          num(scaled(r.get("flops"), 1e9), 2),
                          us_text(r.get("kernel_time_us"), r.get("kernel_time_lo_us"), r.get("kernel_time_hi_us")),
                          num(r.get("achieved_gbps"), 0), pct(r.get("copy_bw_fraction")),
                          pct(r.get("same_size_copy_fraction")), num(r.get("achieved_tflops"), 2),
                          pct(r.get("fp32_peak_fraction")), r.get("launch_path") or "n/a"])
    rates = table([("shape", "l"), ("impl", "l"), ("MB moved", "r"), ("GFLOP", "r"), ("kernel µs [95% interval]", "r"),
                   ("GB/s", "r"), ("of copy bw", "r"), ("of same-size copy", "r"), ("TFLOP/s", "r"),
                   ("of FP32 peak", "r"), ("launch path", "l")], rate_rows)

    # per kernel
    det_rows = [[r.get("shape"), r.get("impl"), r.get("short_name"), num(r.get("per_iteration"), 2),
                 num(scaled(r.get("median_ns"), 1e3)), num(scaled(r.get("min_ns"), 1e3)),
                 num(scaled(r.get("max_ns"), 1e3)), r.get("grid"), r.get("block"),
                 num(r.get("registers"), 0)] for r in _order(_rows(detail, op=op), shapes)]
    kernel_detail = table([("shape", "l"), ("impl", "l"), ("kernel", "l"), ("launches/call", "r"), ("median µs", "r"),
                           ("min µs", "r"), ("max µs", "r"), ("grid", "l"), ("block", "l"), ("registers", "r")], det_rows)

    # spans
    op_span = _order(_rows(span, op=op), shapes)
    span_table = table([("shape", "l"), ("impl", "l"), ("median", "r"), ("mean", "r"), ("std", "r"), ("min", "r"),
                        ("max", "r"), ("samples", "r"), ("launch path", "l"), ("CPU to itself", "l"), ("threads", "r")],
                       [[r.get("shape"), r.get("impl"), num(r.get("span_median_us")), num(r.get("span_mean_us")),
                         num(r.get("span_std_us")), num(r.get("span_min_us")), num(r.get("span_max_us")),
                         num(r.get("samples"), 0), r.get("launch_path") or "n/a", yes(r.get("exclusive")),
                         num(r.get("threads"), 0)] for r in op_span])

    # checks
    check_rows = []
    failed = []
    for r in op_checks:
        passed = summary.truth(r.get("passed"))
        check_rows.append([r.get("shape"), r.get("impl"), "yes" if passed else "NO", sci(r.get("max_abs_err")),
                           sci(r.get("max_rel_err")), sci(r.get("rel_l2_err")), f"{safe.plain(r.get('atol'))} / {safe.plain(r.get('rtol'))}"])
        if passed is False:
            failed.append({"impl": r.get("impl"), "shape": r.get("shape"),
                           "error": sentence(r.get("error") or "its output disagreed with the reference")})
    checks = table([("shape", "l"), ("impl", "l"), ("passed", "l"), ("max abs error", "r"), ("max rel error", "r"),
                    ("rel L2 error", "r"), ("atol / rtol", "l")], check_rows)

    # counters and census
    impls_here = list(dict.fromkeys(str(r.get("impl")) for r in op_kt)) or base_impls
    counters = counters_context(tables.get("counters"), op, default, impls_here, control, cfg.get("counters") or {})
    measured = {r["impl"]: r for r in counters.get("impls", []) if r.get("status") == "ok"}
    census_rows = []
    for r in _rows(census, op=op):
        served = [s.strip() for s in str(r.get("shapes") or "").replace(",", ";").split(";")]
        m = measured.get(str(r.get("impl"))) if (default in served or default.split("-", 1)[0] in served) else None
        census_rows.append([r.get("impl"), r.get("kernel"), r.get("specialization"), r.get("shapes"), num(r.get("block"), 0),
                            num(r.get("registers"), 0), f"{num(r.get('spill_stores'), 0)}/{num(r.get('spill_loads'), 0)}",
                            num(r.get("stack_bytes"), 0), num(r.get("static_smem"), 0),
                            "/".join(num(r.get(f"ld_global_{w}"), 0) for w in (128, 64, 32)),
                            "/".join(num(r.get(f"st_global_{w}"), 0) for w in (128, 64, 32)), num(r.get("barriers"), 0),
                            pct_points(m.get("achieved_occupancy_pct")) if m else "–",
                            num(scaled(m.get("dram_bytes_per_s"), 1e9), 0) if m else "–",
                            pct_points(m.get("l2_hit_rate_pct")) if m else "–",
                            (safe.plain(r.get("source_sha256"))[:12] or "n/a"), r.get("compiler") or "n/a"])
    census_table = table([("impl", "l"), ("kernel", "l"), ("specialization", "l"), ("serves shapes", "l"), ("block", "r"),
                          ("registers", "r"), ("spills (st/ld B)", "l"), ("stack B", "r"), ("smem B", "r"),
                          ("global ld 128/64/32", "l"), ("global st 128/64/32", "l"), ("barriers", "r"),
                          ("achieved occupancy", "r"), ("DRAM GB/s", "r"), ("L2 hit", "r"), ("source sha256", "l"),
                          ("compiler", "l")], census_rows)

    default_spans = {str(r.get("impl")): num(r.get("span_median_us")) + (f" ({r['launch_path']})" if r.get("launch_path") else "")
                     for r in op_span if str(r.get("shape")) == default}
    disturbed = [r for r in _rows(tables.get("gpu_state"), op=op) if summary.truth(r.get("disturbed"))]
    above = [r for r in tctx["above"] if str(r.get("op")) == op]
    bits = [f"{len(shapes)} shape{'s' if len(shapes) != 1 else ''}: {_counts_text(counts)}"]
    bits.append("every check passed" if not failed else f"{len(failed)} check{'s' if len(failed) > 1 else ''} failed")
    if above:
        bits.append(f"control above its band at {len(above)}")
    if disturbed:
        bits.append(f"{len({(str(r['shape'])) for r in disturbed})} disturbed group(s)")
    if distrust:
        bits.append(f"{plural(len(distrust), 'kernel time')} the cross-check distrusts")
    return {
        "name": op, "default": default, "shapes": shapes, "claims": claims, "claim": claims[0], "counts": counts,
        "summary_line": f"{op}: " + "; ".join(bits), "figure": figure, "sweep": sweep_table, "rates": rates,
        "kernel_detail": kernel_detail, "span": span_table, "span_facts": _span_facts(op_span), "checks": checks,
        "default_spans": default_spans,
        "failed": failed, "all_checks_passed": not failed and bool(op_checks), "census": census_table,
        "counters": counters, "memory_bound": all((summary.number(r.get("flops")) or 0) == 0 for r in sweep_rows.values()),
        "impls": base_impls, "external": "external" in base_impls,
    }


# ------------------------------------------------------------------------------ the namespace


def build_context(cfg: Mapping[str, Any], tables: Mapping[str, Any], provenance: Mapping[str, Any],
                  figures: Mapping[str, str] | None = None, overview: str | None = None) -> dict[str, Any]:
    """Everything the templates print, from the loaded tables (name -> DataFrame), the provenance
    and the config: `figures` maps an operation to its sweep figure's path relative to the field
    note, `overview` is the overview figure's. Numbers are formatted here; strings from tables
    and configs are left as they are, for the templates to escape."""
    control = _control_of(cfg)
    judged = tables.get("controls") is not None and len(tables["controls"]) > 0
    tctx = trust_context.report_context(tables.get("controls"), tables.get("drift"), counters=tables.get("counters"),
                                check=tables.get("check"), kernel_time=tables.get("kernel_time"),
                                gpu_state=tables.get("gpu_state"))
    kind = summary.interval_kind(tables.get("sweep"))
    sweep = tables.get("sweep")
    rounds = sorted({int(v) for v in (summary.number(x) for x in (sweep["rounds"] if sweep is not None and "rounds" in sweep
                                                                  else [])) if v is not None})
    operations = [_op_context(cfg, str(op), spec, tables, tctx, judged, control, (figures or {}).get(str(op)))
                  for op, spec in cfg["operations"].items()]
    total = {k: sum(o["counts"][k] for o in operations) for k in (*COUNT_KEYS, "shapes")}
    legacy = sorted({c["recorded"] for o in operations for c in o["claims"]
                     if c["recorded"] in summary.LEGACY_VERDICTS})
    taken: set[str] = set()
    # the summary's own sections first, under the anchors their headings get (the page's ids are these)
    code = binaries.serving(tables.get("census"))
    change_ctx = change.context(tables.get("change"), tables.get("controls"),
                                {str(op): i for i, op in enumerate(cfg["operations"])}, code)
    targets_ctx = targets.context(tables.get("targets"), tables.get("controls"), tables.get("kernel_time"),
                                  tables.get("counters"), tables.get("variants"))
    toc: list[dict[str, str]] = []
    if change_ctx:
        change_ctx["anchor"] = anchor(f"This change against {', '.join(change_ctx['labels'])}", taken)
        toc.append({"title": "This change", "anchor": change_ctx["anchor"]})
    if targets_ctx:
        targets_ctx["anchor"] = anchor("Targets", taken)
        toc.append({"title": "Targets", "anchor": targets_ctx["anchor"]})
    ops_toc = [{"title": o["name"], "anchor": anchor(o["name"], taken)} for o in operations]
    toc += ops_toc
    for o, t in zip(operations, ops_toc, strict=True):
        o["anchor"] = t["anchor"]
    known = resolution_context(cfg, tables.get("variants"), tables.get("cross_check"), tables.get("census"))
    sections = {}
    for key, title in (("trust", "Controls and drift"), ("resolution", "Resolution: A/A pairs and planted slowdowns"),
                       ("variants", "What was tried and not kept"),
                       ("cross_check", "Cross-check against graph replay"), ("gpu_state", "GPU state"),
                       ("method", "Method and provenance"), ("limits", "What these numbers do not establish")):
        if key == "resolution" and known is None:
            continue
        sections[key] = {"title": title, "anchor": anchor(title, taken)}
        toc.append(sections[key])
    gpus = provenance.get("gpus") or []
    git = provenance.get("git") or {}
    cross = cross_check_context(tables.get("cross_check"), cfg.get("cross_check") or {}, _control_of(cfg),
                                resolution.margin(cfg))
    _replay_into_claims(operations, cross)
    commands = summary.commands(provenance)
    counters_states = {o["counters"]["state"] for o in operations}
    # each check raises its flags or, where it ran and raised none, says so in the "No flags" line
    flag_lines, clean = list(tctx["flags"]), list(tctx["clean"])
    if cross:
        if cross["disagree"]:
            flag_lines.append(cross_check_flag(cross))
        else:
            clean.append("graph replay agreeing with the captures")
    # every A/A pair of the session, the change's unchanged rows too, feeds the one flag
    answers = (known["rows"] if known else []) + change.aa_pairs(tables.get("change"), code)
    wrong = resolution.flags(answers)
    flag_lines += wrong
    known_clause = resolution.checked(answers)
    if known_clause and not wrong:
        clean.append(known_clause)
    if not judged:
        flag_lines.append("No controls table: no band judged these captures.")
    return {
        "namespace": cfg["namespace"], "cache_mode": cfg.get("cache_mode", "hot"), "capture": cfg.get("capture") or {},
        "span_cfg": cfg.get("span") or {}, "arch": cfg.get("arch") or (provenance.get("config") or {}).get("arch"),
        "operations": operations, "provenance": provenance, "gpu_name": gpu_label(gpus),
        "commit": safe.plain(git.get("commit")) or "unknown", "dirty": git.get("dirty"),
        "dirty_unknown": dirty_unknown(git),
        "date": safe.plain(provenance.get("date_utc")) or "unknown", "host": safe.plain(provenance.get("host")),
        "versions": provenance.get("versions") or {}, "commands": commands,
        "config_sha256": provenance.get("config_sha256") or "n/a",
        "reading_link": safe.Trusted(READING_LINK), "reading": READING, "overview": overview,
        "control": control, "ours": OURS, "library": LIBRARY, "impl_label": IMPL_LABEL,
        "interval": kind, "legacy": legacy, "judged": judged, "rounds": "/".join(str(r) for r in rounds),
        "margin": kind["margin"], "margin_pct": f"{kind['margin'] * 100:g}%" if kind["margin"] is not None else None,
        "counts": total, "count_keys": COUNT_KEYS, "verdicts": stats.VERDICTS,
        "flags": flag_lines, "clean": clean, "trust": tctx, "trust_section": _trust_section(tctx), "toc": toc, "sections": sections,
        "ceilings": records(tables.get("ceilings")), "gpu_quiet": gpu_quiet(tables.get("gpu_state")),
        "ceilings_measured": bool((cfg.get("ceilings") or {}).get("enabled", True)),
        "cross_check": cross, "resolution": known,
        "variants": variants_context(tables.get("variants"), set(resolution.known(cfg)),
                                     binaries.identical_variants(code, tables.get("variants")),
                                     any(v is not None for v in code.values())),
        "change": change_ctx,
        "stages": change.stages(tables.get("change"), tables.get("kernel_time"), tables.get("span"), control,
                                git.get("commit"), {str(op): i for i, op in enumerate(cfg["operations"])}, code),
        "targets": targets_ctx,
        "gpu_groups": gpu_groups(tables.get("kernel_time")),
        "counters_read": "ok" in counters_states, "counters_states": sorted(counters_states),
        "not_ranked": [c for o in operations for c in o["claims"] if c["kind"] != "ratio"],
        "field_note_path": f"report/{cfg['namespace']}/field_note.md",
        "bundle_path": f"bundles/{cfg['namespace']}.evidence.tar.gz",
        "page_path": f"report/{cfg['namespace']}/index.html",
        "summary_path": f"artifacts/{cfg['namespace']}/summary.json",
    }


# ------------------------------------------------------------------------------ loading and rendering


TABLES = ("kernel_time", "kernel_time_detail", "span", "check", "sweep", "census", "ceilings", "controls", "drift",
          "gpu_state", "counters", "cross_check", "variants", "change", "targets")
"""Every table a report is rendered from (tables/<name>.csv)."""


def table_inputs(ns_dir: str | Path) -> dict[str, str]:
    """The render's inputs from a namespace folder: each of TABLES it has, and its provenance."""
    tdir = Path(ns_dir) / "tables"
    inputs = {t: str(tdir / f"{t}.csv") for t in TABLES if (tdir / f"{t}.csv").is_file()}
    inputs["provenance"] = str(Path(ns_dir) / "provenance.json")
    return inputs


def load_tables(inputs: Mapping[str, str]) -> dict[str, Any]:
    """The tables among `inputs` (name -> CSV path), identifying columns read as text."""
    return {n: history.read_table(inputs[n]) for n in TABLES if n in inputs}


def _md_finalize(value: Any) -> str:
    return str(value) if isinstance(value, safe.Trusted) else safe.md_text(value)


def _html_finalize(value: Any) -> Any:
    return value if hasattr(value, "__html__") else safe.visible(value)


def _md_html(value: Any) -> safe.Trusted:
    return safe.Trusted(safe.md_html(value))


_CODE = re.compile(r"[A-Za-z0-9 ._/=:,+-]+")
"""What a code span of a report may hold: text from a table or config with anything else is printed
as escaped plain text instead (a backtick would end the span, and nothing is escaped inside one)."""


def _md_code(value: Any) -> safe.Trusted:
    text = safe.plain(value)
    return safe.Trusted(f"`{text}`" if _CODE.fullmatch(text) else safe.md_text(text))


def _html_code(value: Any) -> Any:
    import markupsafe

    return markupsafe.Markup("<code>{}</code>").format(safe.visible(value))


def md_table(t: Mapping[str, Any]) -> safe.Trusted:
    """A table of the context as a GitHub markdown table, every cell escaped (safe.md_cell)."""
    if not t["rows"]:
        return safe.Trusted("(No rows.)")
    def cell(value: Any) -> str:
        return str(value) if isinstance(value, safe.Trusted) else safe.md_cell(value)

    head = "|" + "".join(f" {cell(c)} |" for c in t["columns"])
    rule = "|" + "".join("---:|" if a == "r" else "---|" for a in t["align"])
    body = ["|" + "".join(f" {cell(c)} |" for c in row) for row in t["rows"]]
    return safe.Trusted("\n".join([head, rule, *body]))


def fold(line: Any) -> safe.Trusted:
    """The opening of a section GitHub shows folded, `line` its one-line summary; the blank line
    after it lets markdown inside render."""
    return safe.Trusted(f"<details><summary>{_md_html(line)}</summary>\n")


def unfold() -> safe.Trusted:
    """The end of a folded section, after a blank line."""
    return safe.Trusted("\n</details>")


def _environment(kind: str) -> Any:
    import jinja2

    html = kind == "html"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=html,
                             finalize=_html_finalize if html else _md_finalize)
    if html:
        env.filters["code"] = _html_code
    else:
        env.filters["raw_html"] = _md_html
        env.filters["code"] = _md_code
        env.globals.update(md_table=md_table, fold=fold, unfold=unfold)
    env.filters["num"] = num
    env.filters["in_parentheses"] = in_parentheses
    return env


def render_markdown(template: str, ctx: Mapping[str, Any]) -> str:
    """One markdown template of report/templates/ rendered with the context."""
    return str(_environment("md").get_template(template).render(**ctx))


def inline_svg(svg: str, prefix: str) -> str:
    """An SVG file's text made fit to sit inside an HTML page: no XML prolog, doctype, metadata,
    comment or namespace declaration (nothing that names a remote address), and every id and class
    prefixed, in its stylesheet too, so that several figures on one page never share one (a
    stylesheet inside an inlined SVG holds for the whole page). EvidenceError (one sentence) for
    text that holds a script, a foreign object or a reference to anything outside the figure."""
    text = re.sub(r"<\?xml[^>]*\?>", "", svg)
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text)
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = re.sub(r'(href=")#([^"]+)"', lambda m: f'{m.group(1)}#{prefix}-{m.group(2)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}-{m.group(1)})", text)
    text = re.sub(r'\bclass="([^"]+)"', lambda m: 'class="' + " ".join(f"{prefix}-{c}" for c in m.group(1).split()) + '"',
                  text)
    text = re.sub(r"<style\b[^>]*>.*?</style>", lambda m: re.sub(r"\.([A-Za-z_][\w-]*)(?=[^{}]*\{)", rf".{prefix}-\1",
                                                                  m.group(0)), text, flags=re.DOTALL)
    if re.search(r"<script|<foreignObject|href=\"(?!#)|url\((?!#)|@import|\son\w+=", text, flags=re.IGNORECASE):
        raise EvidenceError(f"The figure {prefix} holds a script or a reference outside itself, so it is not inlined.")
    return text.strip()


def render_html(ctx: Mapping[str, Any], svgs: Mapping[str, Path | str]) -> str:
    """The page: one self-contained HTML document from the same context as the markdown, every
    figure in `svgs` (op name or 'overview' -> SVG path) inlined."""
    import markupsafe

    inlined = {}
    for i, (name, path) in enumerate(svgs.items()):
        inlined[name] = markupsafe.Markup(inline_svg(Path(path).read_text(), f"fig{i}"))
    return str(_environment("html").get_template("page.html.j2").render(**ctx, svg=inlined))


def _draw(cfg: Mapping[str, Any], loaded: Mapping[str, Any], paths: Mapping[str, Path], overview: Path | None,
          not_ranked: set[tuple[str, str]]) -> None:
    sweep = loaded.get("sweep")
    if sweep is None:
        raise EvidenceError("The namespace has no sweep table, so no figure can be drawn.")
    control = _control_of(cfg)
    for op, path in paths.items():
        figs.sweep_figure(sweep, op, path, control=control, cache_mode=str(cfg.get("cache_mode", "hot")))
    if overview is not None:
        defaults = {str(op): str(spec["default"]) for op, spec in cfg["operations"].items()}
        figs.overview_figure(sweep, defaults, overview, control=control, ours=OURS,
                             cache_mode=str(cfg.get("cache_mode", "hot")), not_ranked=not_ranked)


def output_paths(namespace: str, operations: Sequence[str], artifacts: str | Path = "artifacts",
                 reports: str | Path = "report") -> dict[str, Any]:
    """Where a namespace's render writes: both reports, the page and the figures under
    report/<ns>/, the machine-readable summary beside its tables (artifacts/<ns>/summary.json)."""
    rep, art = Path(reports) / namespace, Path(artifacts) / namespace
    return {"field_note": rep / "field_note.md", "issue_comment": rep / "issue_comment.md", "html": rep / "index.html",
            "overview": rep / "figures" / "overview.svg", "summary": art / "summary.json",
            "figures": [rep / "figures" / f"{op}_sweep.svg" for op in operations]}


def render_namespace(cfg: Mapping[str, Any], inputs: Mapping[str, str], outputs: Mapping[str, Any],
                     draw: bool = True) -> None:
    """render_reports with every output of output_paths (or a dict of the same keys)."""
    render_reports(cfg, inputs, outputs["field_note"], outputs["issue_comment"], [str(f) for f in outputs["figures"]],
                   html=outputs["html"], summary=outputs["summary"], overview=outputs["overview"], draw=draw)


def render_reports(cfg: Mapping[str, Any], inputs: Mapping[str, str], field_note: str | Path, issue_comment: str | Path,
                   figures: list[str] | None = None, *, html: str | Path | None = None,
                   summary: str | Path | None = None, overview: str | Path | None = None, draw: bool = True) -> None:
    """Render the field note and the issue comment; with `figures` (one SVG path per operation,
    named '<op>_sweep.svg'), draw each operation's sweep figure and link it from the field note;
    with `overview`, draw the overview figure (every operation at its default shape) and link it;
    with `html`, write the self-contained page (its figures inlined, drawn into a temporary folder
    where they were not asked for); with `summary`, write the machine-readable summary there.
    With `draw` False, `figures` and `overview` are already drawn from these same tables (a
    re-render that drew them into a temporary folder first): linked and inlined, not drawn again;
    EvidenceError where one is missing."""
    if not draw:
        absent = [str(p) for p in [*(figures or []), *([overview] if overview else [])] if not Path(p).is_file()]
        if absent:
            raise EvidenceError(f"Asked to link figures already drawn, but none is at {', '.join(absent)}.")
    provenance = json.loads(Path(inputs["provenance"]).read_text())
    loaded = load_tables(inputs)
    note_dir = Path(field_note).parent
    paths = {Path(p).name.removesuffix("_sweep.svg"): Path(p) for p in figures or []}
    links = {op: os.path.relpath(p, note_dir) for op, p in paths.items()}
    over = os.path.relpath(overview, note_dir) if overview else None
    ctx = build_context(cfg, loaded, provenance, {op: safe.Trusted(_link(v)) for op, v in links.items()},
                        safe.Trusted(_link(over)) if over else None)
    not_ranked = {(c["op"], c["shape"]) for c in ctx["not_ranked"] if c["rankable"] is False}  # what the figures need
    if draw:
        _draw(cfg, loaded, paths, Path(overview) if overview else None, not_ranked)
    write_text(render_markdown("field_note.md.j2", ctx), field_note)
    comment = render_markdown("issue_comment.md.j2", ctx)
    if len(comment) > COMMENT_LIMIT:
        raise EvidenceError(f"The issue comment has {len(comment)} characters, over GitHub's limit of {COMMENT_LIMIT}.")
    write_text(comment, issue_comment)
    if html is not None:
        ops = [str(op) for op in cfg["operations"]]
        with tempfile.TemporaryDirectory(prefix="report-figures-") as tmp:
            svgs: dict[str, Path] = {}
            todo = {op: Path(tmp) / f"{op}_sweep.svg" for op in ops if op not in paths}
            over_path = Path(overview) if overview else Path(tmp) / "overview.svg"
            _draw(cfg, loaded, todo, None if overview else over_path, not_ranked)
            svgs["overview"] = over_path
            for op in ops:
                svgs[op] = paths.get(op) or todo[op]
            write_text(render_html(ctx, svgs), html)
    if summary is not None:
        _write_summary(cfg, loaded, provenance, summary, ctx)


def _replay_into_claims(operations: Sequence[Mapping[str, Any]], cross: Mapping[str, Any] | None) -> None:
    """Each claim gets ours over the control by graph replay a call at its shape (`replay_value`,
    rounded to 6 digits; `replay`, as printed) from the cross-check's ratios, and whether it parts
    from the kernel-time ratio by more than the margin (`replay_differs`): the claim then says it,
    since a verdict by kernel time alone would hide time a call spends at the kernels' edges."""
    replayed = {(str(r["op"]), str(r["shape"])): r for r in (cross or {}).get("ratios", [])}
    for o in operations:
        for c in o["claims"]:
            r = replayed.get((str(c["op"]), str(c["shape"])))
            c["replay_value"] = round(float(r["replay"]), 6) if r else None
            c["replay"] = num(c["replay_value"], 3) if r else None
            c["replay_differs"] = bool(r and r["differ"]) and c["kind"] == "ratio"


def headline(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """What the first screen of every report says, as data for summary.json: the flag lines, one
    claim per (operation, shape) with the verdict a reader sees ('not ranked' and its reason where
    the pairing is not rankable), the counts, the disturbed captures and the kernel times the
    cross-check distrusts. The reports print these same values; each claim also carries ours over
    the control by graph replay a call (`replay_ratio`, the cross-check section's), null where the
    cross-check did not compare both, and whether it parts from the kernel-time ratio by more than
    the margin (`replay_differs`; the claim line then gives it)."""
    claims = []
    for o in ctx["operations"]:
        for i, c in enumerate(o["claims"]):
            claims.append({"op": c["op"], "shape": c["shape"], "default": i == 0, "ours": OURS, "control": ctx["control"],
                           "library": LIBRARY, "ours_us": c["ours_us"], "control_us": c["control_us"],
                           "library_us": c["library_us"], "ratio": c["ratio_value"], "lo": c["lo"], "hi": c["hi"],
                           "verdict": c["shown"], "verdict_recorded": c["recorded"], "rankable": c["rankable"],
                           "reason": c["reason"] or None, "note": c["note"] or None, "disturbed": bool(c["disturbed"]),
                           "distrusted": list(c["distrusted"]), "replay_ratio": c["replay_value"],
                           "replay_differs": c["replay_differs"]})
    return {
        "flags": list(ctx["flags"]),
        "checked": list(ctx["clean"]),
        "claims": claims,
        "counts": {**{o["name"]: dict(o["counts"]) for o in ctx["operations"]}, "all": dict(ctx["counts"])},
        "disturbed": [{"op": d["op"], "shape": d["shape"], "impl": d["impl"], "flags": summary.text(d.get("flags"))}
                      for d in (ctx.get("gpu_quiet") or {}).get("disturbed", [])],
        "cross_check_disagree": [{"op": r.get("op"), "shape": r.get("shape"), "impl": r.get("impl"),
                                  "kernel_time_us": summary.number(r.get("kernel_time_us")),
                                  "graph_median_us": summary.number(r.get("graph_median_us"))}
                                 for r in (ctx.get("cross_check") or {}).get("disagree", [])],
    }


def _write_summary(cfg: Mapping[str, Any], loaded: Mapping[str, Any], provenance: Mapping[str, Any],
                   path: str | Path, ctx: Mapping[str, Any]) -> None:
    summary.write(summary.build(loaded, provenance, control=_control_of(cfg), headline=headline(ctx)), path)


def _link(path: str) -> str:
    """A figure's relative path as a markdown link target: forward slashes, and only the
    characters a file name of ours has."""
    out = path.replace(os.sep, "/")
    if not re.fullmatch(r"[A-Za-z0-9_./-]+", out):
        raise EvidenceError(f"The figure path {out!r} holds characters a link of the report does not carry.")
    return out


def comment_length(cfg: Mapping[str, Any], tables: Mapping[str, Any], provenance: Mapping[str, Any]) -> int:
    """The characters of the issue comment these tables give (GitHub counts characters)."""
    return len(render_markdown("issue_comment.md.j2", build_context(cfg, tables, provenance)))


__all__ = ["COMMENT_LIMIT", "IMPL_LABEL", "IMPL_ORDER", "READING", "TABLES", "anchor", "build_context",
           "comment_length", "counters_context", "cross_check_context", "gpu_groups", "gpu_label", "gpu_quiet",
           "inline_svg", "load_tables", "md", "num", "render_html", "render_markdown", "render_reports",
           "table_inputs", "variants_context"]
