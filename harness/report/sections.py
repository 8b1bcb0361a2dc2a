"""The sections of a report beside the claims, as the templates lay them out: a table's rows
chosen and ordered, the counters, the variants tried, the cross-check, the GPU's state and the
controls and drift (each a `table(...)`: columns with their alignment, and rows of text)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from harness.io import row_dicts
from harness.report import resolution, safe, summary
from harness.report.words import (IMPL_ORDER, OURS, arrows, disagrees, notebook, num, number, pct, pct_points, ratio_text, records, scaled,
                                  sentence, text, truth, unsampled, yes)
from harness.tables import counters as ctr
from harness.tables import stats, trust, variants


def table(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """A table for the templates: column titles (the report's own words), alignment ('l' or 'r')
    and rows of text cells, escaped where they are printed unless the report composed them from
    numbers (`safe.Trusted`)."""
    return {"columns": [safe.Trusted(c) for c, _ in columns], "align": [a for _, a in columns],
            "rows": [[cell if isinstance(cell, safe.Trusted) else safe.plain(cell) for cell in row] for row in rows]}


def _rows(frame: Any, **match: str) -> list[dict[str, Any]]:
    """Records of a frame whose columns equal the given values (as text)."""
    out = []
    for r in records(frame):
        if all(str(r.get(k)) == v for k, v in match.items()):
            out.append(r)
    return out


def _order(rows: list[dict[str, Any]], shapes: Sequence[str]) -> list[dict[str, Any]]:
    """Rows by shape (in `shapes` order), then implementation (IMPL_ORDER, variants after)."""
    s_index = {s: i for i, s in enumerate(shapes)}

    def key(r: dict[str, Any]) -> tuple[int, int, str]:
        impl = str(r.get("impl"))
        base = impl.partition(".")[0]
        i = IMPL_ORDER.index(base) if base in IMPL_ORDER else len(IMPL_ORDER)
        return s_index.get(str(r.get("shape")), len(s_index)), i + (0 if "." not in impl else 1), impl

    return sorted(rows, key=key)


def counters_context(frame: Any, op: str, shape: str, impls: list[str], control: str,
                     counters_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The counters of one operation at its default shape: one summary per implementation
    (harness.tables.counters.summarise), and ours compared with the control on each counter.
    `state` says why there are none: 'off' (config), 'unavailable' (with the reason, one sentence),
    'missing' (no table or no rows)."""
    if not counters_cfg.get("enabled"):
        return {"state": "off"}
    if frame is None or len(frame) == 0:
        return {"state": "missing"}
    here = frame[(frame["op"].astype(str) == op) & (frame["shape"].astype(str) == shape)]
    if here.empty:
        return {"state": "missing"}
    calls = int(counters_cfg.get("iterations", 1))
    summaries = []
    for impl in impls:
        found = row_dicts(here[here["impl"].astype(str) == impl])
        if found:
            summaries.append({"impl": impl, **ctr.summarise(found, calls)})
    by_impl = {r["impl"]: r for r in summaries}
    not_ok = [r for r in summaries if r["status"] != "ok"]
    if not_ok and len(not_ok) == len(summaries):
        return {"state": "unavailable", "status": safe.plain(not_ok[0]["status"]),
                "reason": sentence(not_ok[0].get("reason") or "no reason recorded")}
    against = control if control != OURS else "triton"
    comparison: dict[str, Any] | None = None
    if by_impl.get(OURS, {}).get("status") == "ok" and by_impl.get(against, {}).get("status") == "ok":
        compared = ctr.compare(by_impl[OURS], by_impl[against])
        comparison = {"against": against, "rows": compared, "differ": [c for c in compared if c["differs"]],
                      "same": [c for c in compared if not c["differs"]]}
    table_rows = []
    for r in summaries:
        if r["status"] == "ok":
            stalls = ", ".join(f"{name} {num(v, 1)}" for name, v in r.get("top_stalls", []))
            table_rows.append([r["impl"], num(r.get("kernels"), 0), num(scaled(r.get("duration_ns"), 1e3)),
                               pct_points(r.get("achieved_occupancy_pct")), pct_points(r.get("theoretical_occupancy_pct")),
                               r.get("limiter") or "", num(r.get("registers_per_thread"), 0),
                               num(scaled(r.get("dram_bytes_per_s"), 1e9), 0),
                               pct_points(r.get("dram_pct_of_peak")), pct_points(r.get("l1_hit_rate_pct")),
                               pct_points(r.get("l2_hit_rate_pct")),
                               num(scaled(r.get("instructions"), 1e6)), stalls])
        else:
            table_rows.append([r["impl"], f"counters {r['status']}: {sentence(r.get('reason'))}"] + [""] * 11)
    cols = [("impl", "l"), ("kernels", "r"), ("duration µs (ncu)", "r"), ("achieved occupancy", "r"),
            ("theoretical occupancy", "r"), ("limited by", "l"), ("registers", "r"), ("DRAM GB/s", "r"),
            ("DRAM % of peak", "r"), ("L1 hit", "r"), ("L2 hit", "r"), ("instructions (M)", "r"),
            ("top stalls (warps per issue)", "l")]
    comparison_text = ""
    if comparison:
        differ: list[dict[str, Any]] = comparison["differ"]
        same: list[dict[str, Any]] = comparison["same"]
        if differ:
            parts = []
            for c in differ:
                delta = f"{c['delta']:+.1f} points" if c["kind"] == "points" else f"×{num(c['delta'])}"
                parts.append(f"{c['label']} ({c['ours_text']} vs {c['control_text']}, {delta})")
            comparison_text = f"Ours ({OURS}) against {against}: they differ in " + "; ".join(parts)
        else:
            comparison_text = f"Ours ({OURS}) against {against}: no counter differs"
        if same:
            comparison_text += (f"; within {num(ctr.DIFFER_POINTS, 0)} points or {num(ctr.DIFFER_RATIO * 100, 0)}% in "
                                + ", ".join(c["label"] for c in same))
        comparison_text += "."
    return {"state": "ok", "shape": shape, "impls": summaries, "comparison": comparison,
            "comparison_text": comparison_text, "table": table(cols, table_rows)}


def variants_context(frame: Any, known: Collection[tuple[str, str]] = (),
                     same_binary: Collection[tuple[str, str, str]] = (), binaries_known: bool = False) -> dict[str, Any] | None:
    """The variants measured in this run against their bases (tables/variants.csv), and which were
    not kept; None where the table is absent or empty. The variants `known` ((op, variant) whose
    answer is known in advance: harness.report.resolution) are in the table of every variant but
    neither kept nor not kept: they were not tried for their own sake. Nor is a variant at a shape
    in `same_binary` ((op, shape, variant) where it runs its base's code, harness.tables.binaries):
    its ratio there is an A/A pair's, not the variant's effect, so its outcome is of the other
    shapes (`identical_everywhere` lists those with none). With `binaries_known` (the census has
    the hashes of the kernels' SASS) the table of every variant says which rows ran the base's
    code. `notebooks` names the notebook of each operation with a variant (words.notebook)."""
    rows = records(frame)
    if not rows:
        return None

    def key(r: Mapping[str, Any]) -> tuple[str, str, str]:
        return str(r.get("op")), str(r.get("shape")), str(r.get("variant"))

    tried_rows = [r for r in rows if key(r)[::2] not in known]
    outcomes = variants.outcomes([r for r in tried_rows if key(r) not in same_binary])
    with_outcome = {(o["op"], o["variant"]) for o in outcomes}
    identical_everywhere = list(dict.fromkeys(str(r.get("variant")) for r in tried_rows
                                              if key(r)[::2] not in with_outcome))
    columns = [("op", "l"), ("variant", "l"), ("shape", "l"), ("base µs", "r"), ("variant µs", "r"),
               ("variant/base", "r"), ("verdict", "l")] + ([("binary", "l")] if binaries_known else [])
    measured = table(columns,
                     [[r.get("op"), r.get("variant"), r.get("shape"), num(r.get("base_us")), num(r.get("variant_us")),
                       ratio_text(r.get("ratio"), r.get("ratio_lo"), r.get("ratio_hi")),
                       summary.verdict(r.get("verdict")) or safe.plain(r.get("verdict")) or "n/a"]
                      + ([f"the base's ({r.get('base')})" if key(r) in same_binary else "its own"] if binaries_known else [])
                      for r in rows])

    def span_of(o: Mapping[str, Any]) -> str:
        return f"{num(o['ratio_min'], 3)}–{num(o['ratio_max'], 3)}"

    not_kept = [o for o in outcomes if o["outcome"] == "not kept"]
    tried = table([("op", "l"), ("variant", "l"), ("what it changes", "l"), ("shapes", "r"),
                   ("faster / slower / same / can't tell", "l"), ("variant/base", "l")],
                  [[o["op"], o["variant"], o["description"], o["shapes"],
                    " / ".join(str(o["counts"][v]) for v in stats.VERDICTS), span_of(o)] for o in not_kept])
    candidates = [{"variant": o["variant"], "base": o["base"], "span": span_of(o)} for o in outcomes if o["outcome"] == "candidate"]
    notebooks = [book for op in dict.fromkeys(str(r.get("op")) for r in rows) if (book := notebook(op))]
    return {"rows": rows, "outcomes": outcomes, "measured": measured, "not_kept": not_kept, "tried": tried,
            "candidates": candidates, "binaries_known": binaries_known, "notebooks": notebooks,
            "same_binary": sum(1 for r in tried_rows if key(r) in same_binary),
            "identical_everywhere": identical_everywhere}


def size_range() -> str:
    """The calibrated size of a planted slowdown as text ('2-3%')."""
    lo, hi = resolution.SIZED
    return f"{lo * 100:g}–{hi * 100:g}%"


def resolution_context(cfg: Mapping[str, Any], variants_frame: Any, cross_frame: Any,
                       census_frame: Any = None) -> dict[str, Any] | None:
    """The resolution section (harness.report.resolution.context) with its table and the sentence
    of how many known answers came out as expected; None where the run measured none."""
    known = resolution.context(cfg, variants_frame, cross_frame, census_frame)
    if known is None:
        return None
    known["table"] = table([("op", "l"), ("shape", "l"), ("variant", "l"), ("role", "l"), ("expected", "l"),
                            ("variant/base [interval]", "r"), ("verdict", "l"), ("as expected", "l"),
                            ("planted", "r"), ("replay ratio", "r"), ("idle-start size", "r"), (f"sized {size_range()}", "l"),
                            ("capture − idle starts", "r")],
                           [[r["op"], r["shape"], r["variant"], r["role"], r["expected"], r["ratio_text"],
                             r["verdict_text"], r["as_expected_text"], r["growth_text"], r["replay_text"], r["idle_text"],
                             r["sized_text"], r["alike_text"]]
                            for r in known["rows"]])
    by = "by idle-start timing" if known["idle"] else "by the replay"
    said = "; ".join(f"{resolution.PLURAL[c['role']]}: {c['as_expected']} of {c['pairs']} {c['expected']}"
                     + (f", {c['sized']} of {c['replayed']} sized {size_range()} {by}"
                        if c["role"] == "planted slowdown" and c["replayed"] else "")
                     + (f", {c['alike']} of {c['compared']} sized alike by the capture and the idle starts (within "
                        f"the {known['margin'] * 100:g}% margin)" if c["role"] == "planted slowdown" and c["compared"] else "")
                     + (f", and {c['below']} more sized below the {known['margin'] * 100:g}% margin {by}, where "
                        f"{resolution.BELOW_MARGIN} is right: {c['below_as_expected']} of {c['below']}" if c["below"] else "")
                     for c in known["counts"]) + "."
    known["sentence"] = said[:1].upper() + said[1:]
    return known


def signed(value: float, digits: int = 2) -> str:
    """A difference with its sign, '+0.25' or '-0.13'; one that rounds to zero is '0.00'."""
    text = f"{value:+.{digits}f}"
    return text[1:] if float(text) == 0 else text


def replay_ratios(compared: Sequence[Mapping[str, Any]], control: str, margin: float) -> list[dict[str, Any]]:
    """Ours over `control` at each (op, shape) where the cross-check compared both: by their kernel
    times (nsys) and by their graph-replay times a call, how much more time ours than the control
    adds a call outside its kernel time in the replay (`gap_us`, µs), and whether the two ratios
    differ by more than `margin` (relative). Replay counts the gaps between kernels that kernel
    time leaves out, and runs after the captures: a difference of a fraction of a µs a call is
    time at the kernels' edges, a larger one a GPU whose state moved in between."""
    by: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for r in compared:
        by.setdefault((str(r.get("op")), str(r.get("shape"))), {})[str(r.get("impl"))] = r
    out = []
    for (op, shape), impls in by.items():
        ours, ctl = impls.get(OURS), impls.get(control)
        if ours is None or ctl is None:
            continue
        k_ours, k_ctl = number(ours.get("kernel_time_us")), number(ctl.get("kernel_time_us"))
        g_ours, g_ctl = number(ours.get("graph_median_us")), number(ctl.get("graph_median_us"))
        if k_ours is None or g_ours is None or not k_ctl or not g_ctl:
            continue
        by_kernel, by_replay, gap = k_ours / k_ctl, g_ours / g_ctl, (g_ours - k_ours) - (g_ctl - k_ctl)
        out.append({"op": op, "shape": shape, "kernel": by_kernel, "replay": by_replay, "gap_us": gap,
                    "gap": signed(gap), "differ": abs(by_replay / by_kernel - 1.0) > margin})
    return out


def cross_check_context(frame: Any, cc: Mapping[str, Any], control: str = "triton",
                        margin: float = 0.01) -> dict[str, Any] | None:
    """The cross-check rows, those that disagree and those not compared (with the reason), and ours
    over `control` by kernel time and by graph replay at each shape (`replay_ratios`)."""
    if frame is None:
        return None
    rows = records(frame)
    compared = [r for r in rows if r.get("status") == "ok"]
    disagree = [r for r in compared if disagrees(r)]
    shown = rows if cc.get("enabled", True) else []
    ratios = replay_ratios(compared, control, margin) if shown else []
    ratio_table = table([("op", "l"), ("shape", "l"), (f"{OURS}/{control} by kernel time", "r"),
                         (f"{OURS}/{control} by graph replay", "r"), ("gap a call, ours less control µs", "r"),
                         ("differ", "l")],
                        [[r["op"], r["shape"], num(r["kernel"], 3), num(r["replay"], 3), r["gap"],
                          f"yes, by {num(abs(r['replay'] / r['kernel'] - 1.0) * 100, 1)}%" if r["differ"] else "no"]
                         for r in ratios])
    tab = table([("op", "l"), ("shape", "l"), ("impl", "l"), ("kernels per call", "r"), ("nsys kernel µs", "r"),
                 ("graph replay µs (median, min–max)", "l"), ("difference µs", "r"), ("allowed µs", "r"), ("agree", "l")],
                [[r.get("op"), r.get("shape"), r.get("impl"), num(r.get("kernels_per_call"), 0), num(r.get("kernel_time_us")),
                  (f"{num(r.get('graph_median_us'))} ({num(r.get('graph_min_us'))}–{num(r.get('graph_max_us'))})"
                   if r.get("status") == "ok" else safe.plain(r.get("status"))),
                  signed(d) if (d := number(r.get("difference_us"))) is not None else "",
                  num(r.get("allowed_us")),
                  ("yes" if truth(r.get("agree")) else "NO") if r.get("status") == "ok" else "n/a"] for r in shown])
    return {"rows": shown, "compared": len(compared), "disagree": disagree,
            "skipped": [r for r in rows if r.get("status") != "ok"], "table": tab,
            "ratios": ratios, "ratios_differ": [r for r in ratios if r["differ"]], "ratio_table": ratio_table,
            "control": control, "margin_pct": f"{margin * 100:g}%",
            "replays": cc.get("replays"), "max_seconds": cc.get("max_seconds", 1.0), "rtol": cc.get("rtol", 0.1),
            "atol_us_per_kernel": cc.get("atol_us_per_kernel", 0)}


def gpu_quiet(state: Any) -> dict[str, Any] | None:
    """The GPU's state before the captures, in ranges ('0' / '76-110' W), the captures marked
    disturbed, and a table with one row per (op, shape) group, from gpu_state.csv (with the SM
    clock and the power of the samples taken while kernels ran, against the clock's maximum and the
    enforced power limit, where the table records them); None where the table is absent or empty."""
    if state is None or len(state) == 0:
        return None

    def span_of(values: Sequence[Any]) -> str:
        vals = [v for v in (number(x) for x in values) if v is not None]
        if not vals:
            return "n/a"
        lo, hi = min(vals), max(vals)
        return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"

    rows = records(state)
    disturbed = [{"op": r.get("op"), "shape": r.get("shape"), "impl": r.get("impl"), "flags": r.get("flags")}
                 for r in rows if truth(r.get("disturbed"))]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r.get("op")), str(r.get("shape"))), []).append(r)
    # while kernels ran (NVML's samples without the idle reason), where the table records it: the SM
    # clock's range against its maximum and the most power against the enforced limit, which say how
    # far a software power cap held the GPU down
    busy = any(number(r.get("during_busy_sm_clock_min_mhz")) is not None for r in rows)
    busy_cols = [("SM clock while busy MHz (of max)", "r"), ("power while busy W (of limit)", "r")] if busy else []

    def busy_cells(g: list[dict[str, Any]]) -> list[str]:
        if not busy:
            return []
        clocks = span_of([r.get(c) for r in g for c in ("during_busy_sm_clock_min_mhz", "during_busy_sm_clock_max_mhz")])
        return [f"{clocks} ({span_of([r.get('before_max_sm_clock_mhz') for r in g])})",
                f"{span_of([r.get('during_busy_power_max_w') for r in g])} ({span_of([r.get('before_power_limit_w') for r in g])})"]

    tab = table([("op", "l"), ("shape", "l"), ("captures", "r"), ("utilisation before %", "r"), ("power before W", "r"),
                 ("SM clock MHz", "r"), *busy_cols, ("other processes", "r"), ("waited s", "r"), ("disturbed", "l")],
                [[op, shape, len(g), span_of([r.get("before_utilization_pct") for r in g]),
                  span_of([r.get("before_power_w") for r in g]), span_of([r.get("before_sm_clock_mhz") for r in g]),
                  *busy_cells(g), span_of([r.get("before_compute_processes") for r in g]),
                  num(max((number(r.get("waited_s")) or 0.0) for r in g), 1),
                  "; ".join(dict.fromkeys(safe.plain(r.get("flags")) for r in g if truth(r.get("disturbed"))))
                  or ("unknown (no NVML samples)" if any(unsampled(r) for r in g) else "no")]
                 for (op, shape), g in groups.items()])
    # where each group's rows hold what NVML saw in its own windows, the session's watch as a whole beside it
    session_flags = list(dict.fromkeys(f for r in rows if (f := safe.plain(r.get("session_flags")))))
    attributed = ""
    if all(safe.plain(r.get("during_extent")) == "group" for r in rows):
        hit = sum(any(truth(r.get("disturbed")) for r in g) for g in groups.values())
        if session_flags:
            attributed = (f"NVML's watch over the whole measurement session flagged {'; '.join(session_flags)}; read in "
                          f"each group's own windows (its checks, warm-up, spans and cross-checks, and its captured "
                          f"rounds), {hit} of {len(groups)} groups {'was' if hit == 1 else 'were'} flagged, and "
                          "only those groups' captures are marked disturbed.")
        else:
            attributed = "Each group's row is what NVML read in that group's own windows; the session's watch flagged nothing."
    return {
        "attributed": attributed,
        "captures": len(rows), "utilization": span_of([r.get("before_utilization_pct") for r in rows]),
        "power": span_of([r.get("before_power_w") for r in rows]),
        "sm_clock": span_of([r.get("before_sm_clock_mhz") for r in rows]),
        "processes": span_of([r.get("before_compute_processes") for r in rows]),
        "waited_max_s": max((number(r.get("waited_s")) or 0.0) for r in rows),
        "disturbed": disturbed, "table": tab,
    }


def gpu_groups(kt: Any) -> dict[str, Any] | None:
    """Which GPUs measured the namespace, and every (op, shape) group whose captures came from more
    than one (their ratios are left out of every table); None where the table records no GPU."""
    if kt is None or "gpu_uuid" not in kt or kt["gpu_uuid"].dropna().empty:
        return None
    known = kt.dropna(subset=["gpu_uuid"])
    split = [{"op": op, "shape": shape, "gpus": sorted(str(u) for u in grp["gpu_uuid"].unique())}
             for (op, shape), grp in known.groupby(["op", "shape"], sort=False) if grp["gpu_uuid"].nunique() > 1]
    return {"uuids": sorted(str(u) for u in known["gpu_uuid"].unique()), "split": split}


def _drift_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    out = []
    for r in rows:
        role = safe.plain(r.get("role"))
        if not role:  # a drift.csv written before roles: its unchanged rows of ours bounded it
            impl = str(r.get("impl"))
            role = ("library" if impl in trust.LIBRARY_IMPLS else
                    "bound" if truth(r.get("unchanged_kernel")) else "excluded")
        reason = safe.plain(r.get("reason"))
        bounds = "yes" if role == "bound" else (f"no, {role}: {reason}" if reason and reason != role else f"no, {role}")  # not "control: control"
        change = number(r.get("change_pct"))
        out.append([r.get("op"), r.get("shape"), r.get("impl"), num(r.get("before_us")), num(r.get("after_us")),
                    f"{change:+.1f}%" if change is not None else "n/a", yes(r.get("unchanged_kernel")), bounds])
    return out


def _trust_section(tctx: Mapping[str, Any]) -> dict[str, Any]:
    controls = table([("op", "l"), ("shape", "l"), ("control µs", "r"), ("band µs", "l"), ("observed µs", "l"),
                      ("earlier namespaces", "r"), ("status", "l"), ("rankable", "l")],
                     [[r.get("op"), r.get("shape"), num(r.get("kernel_time_us")),
                       f"{num(r.get('band_lo_us'))}–{num(r.get('band_hi_us'))}" if number(r.get("band_lo_us")) is not None else "n/a",
                       ("n/a" if number(r.get("observed_min_us")) is None else
                        num(r.get("observed_min_us")) if r.get("observed_min_us") == r.get("observed_max_us") else
                        f"{num(r.get('observed_min_us'))}–{num(r.get('observed_max_us'))}"),
                       num(r.get("n_namespaces"), 0), r.get("status") or "n/a", "yes" if r.get("rankable") else "no"]
                      for r in tctx["controls"]])
    notes = list(dict.fromkeys(arrows(r.get("note")) for r in [*tctx["outside"], *tctx["suspect"], *tctx["establishing"]]
                               if r.get("note")))
    bound = tctx.get("bound")
    drift = table([("op", "l"), ("shape", "l"), ("impl", "l"), ("earlier µs", "r"), ("this run µs", "r"), ("change", "r"),
                   ("same census", "l"), ("bounds drift", "l")], _drift_rows(tctx["drift"]))
    return {"controls": controls, "notes": notes, "drift": drift,
            "bound_sentence": arrows(bound.get("sentence") or bound.get("summary")) if bound else "",
            "changed_summary": arrows(bound.get("changed_summary")) if bound else "",
            "excluded_summary": arrows(bound.get("excluded_summary")) if bound else ""}


def _span_facts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the measuring step recorded of the spans' CPU: `state` 'exclusive' (every span ran
    with the CPU to itself), 'shared' (some did not: `where`), or 'unknown' (not recorded)."""
    recorded = [r for r in rows if truth(r.get("exclusive")) is not None]
    if not recorded:
        return {"state": "unknown"}
    shared = [r for r in recorded if truth(r.get("exclusive")) is False]
    threads = sorted({int(t) for t in (number(r.get("threads")) for r in recorded) if t is not None})
    if shared:
        where = list(dict.fromkeys(f"{r['shape']} {r['impl']}" for r in shared))
        return {"state": "shared", "where": ", ".join(where[:8]) + (f" and {len(where) - 8} more" if len(where) > 8 else ""),
                "threads": threads}
    return {"state": "exclusive", "threads": threads}
