"""Two namespaces side by side, kernel by kernel, with a verdict an engineer can act on: same,
faster, slower, or can't tell.

`python -m harness compare A B [--artifacts DIR] [--out FILE.csv]` reads both sides' kernel times
and for every (operation, shape, implementation) in both gives B's kernel time against A's. A side
is a namespace under DIR (its `tables/kernel_time.csv` and `tables/rounds.csv`, else its
`summary.json`) or the path of a `summary.json` (docs/summary-schema.md), as a dashboard keeps it:

* where both have rounds (each capture's `tables/rounds.csv`), the ratio B/A with a 95% bootstrap
  interval over the rounds, resampled independently on each side (two sessions share no rounds),
  and the four verdicts of harness.tables.stats with the equivalence margin (`--margin`, 1%);
* else where both give each kernel time's own interval (a summary), the ratio B/A within
  [B lo / A hi, B hi / A lo]: wider than an interval over the rounds, so it says "can't tell"
  sooner;
* otherwise (tables from before the rounds), the min-max envelope of the two spreads of the
  launches, and "can't tell" where it holds 1: an envelope is not an interval that narrows.

The evidence rules hold here too. A row measured on two different GPUs gets no verdict, whatever
the rounds: where both GPUs are of one model (two H200s) its ratio is still given, without an
interval or a verdict; where the models differ (or one is not recorded), not even the ratio. A
library baseline (torch) is compared only when both namespaces ran the same torch version on the
same GPU; otherwise its row says why not. The command names both GPUs (model and UUID, where the
provenance records them) and both sessions, and says what every comparison here is: two sessions,
and a ratio across sessions is not a same-session verdict; for a verdict on a change, measure both
builds in one run (`snakemake --cores 1 report --config baseline=<revision>`). The result is a tool for the people who change a kernel or the pipeline, not a
figure of any report.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, NamedTuple, cast

import pandas as pd

from harness import ROOT
from harness.errors import EvidenceError, shown
from harness.io import check_out, row_dicts, write_csv
from harness.namespaces import namespace_dir
from harness.report import summary as summary_json
from harness.tables import derive, history, stats, table_files

COMPARE_COLUMNS = ["op", "shape", "impl", "a_us", "b_us", "change_pct", "b_over_a", "b_over_a_lo", "b_over_a_hi",
                   "verdict", "interval", "reason"]
LIBRARY_IMPLS = ("torch",)
ONE_MODEL = "measured on two GPUs of one model"


class Side(NamedTuple):
    """One side of a comparison: its name, kernel times (op, shape, impl, kernel_time_us, and
    where known kernel_time_lo_us/hi_us, gpu_uuid and the launch spread), rounds, torch version,
    the GPUs its provenance records (UUID without its 'GPU-' prefix -> model) and its session
    (the run's date and host, where recorded)."""

    name: str
    kernel_time: pd.DataFrame
    rounds: dict[tuple[str, str, str], list[float]]
    torch: str | None
    gpus: dict[str, str] = {}
    session: str = "session not recorded"


KERNEL_TIME_NUMBERS = ("kernel_time_us", "kernel_time_lo_us", "kernel_time_hi_us", "main_median_us", "main_min_us",
                       "main_max_us")
"""The number columns of a kernel-time table compare reads: text there is one sentence."""


def uuid_key(uuid: Any) -> str | None:
    """A GPU UUID as one key whatever its spelling ('GPU-da5e...' in the tables, 'da5e...' in the
    provenance); None where none is recorded."""
    if uuid is None or (isinstance(uuid, float) and math.isnan(uuid)) or str(uuid).strip() == "":
        return None
    text = str(uuid).strip()
    return text[4:] if text.upper().startswith("GPU-") else text


def _gpus(provenance: Any) -> dict[str, str]:
    gpus = provenance.get("gpus") if isinstance(provenance, dict) else None
    out: dict[str, str] = {}
    for g in gpus if isinstance(gpus, list) else []:
        if isinstance(g, dict) and (key := uuid_key(g.get("uuid"))) and g.get("name"):
            out[key] = str(g["name"])
    return out


def _session(provenance: Any) -> str:
    prov = provenance if isinstance(provenance, dict) else {}
    date, host = prov.get("date_utc"), prov.get("host")
    if isinstance(host, dict):
        host = host.get("name") or host.get("hostname")
    parts = [f"run {shown(date, 40)}" if date else "", f"on host {shown(host, 60)}" if isinstance(host, str) and host else ""]
    return " ".join(p for p in parts if p) or "session not recorded"


SUMMARY_COLUMNS = ["op", "shape", "impl", "kernel_time_us", "kernel_time_lo_us", "kernel_time_hi_us", "gpu_uuid"]


def _from_summary(path: Path) -> Side:
    data = summary_json.read(path)
    rows = [{k: r.get(k) for k in SUMMARY_COLUMNS} for r in data["rows"] if r.get("kernel_time_us") is not None]
    prov = data["provenance"] or {}
    torch = (prov.get("versions") or {}).get("torch")
    return Side(str(data["namespace"]), pd.DataFrame(rows, columns=SUMMARY_COLUMNS), {},
                str(torch) if torch else None, _gpus(prov), _session(prov))


def side(arg: str, artifacts: str | Path = ROOT / "artifacts") -> Side:
    """The side named by `arg`: a summary.json file, else a namespace under `artifacts` (its tables,
    else its summary.json). EvidenceError (one sentence) where neither is there."""
    path = Path(arg)
    if path.suffix == ".json" and path.is_file():
        return _from_summary(path)
    ns_dir = namespace_dir(arg, artifacts)
    if not ns_dir.is_dir():
        raise EvidenceError(f"compare: there is no namespace {ns_dir.name} under {ns_dir.parent}.")
    table = ns_dir / "tables" / "kernel_time.csv"
    if table.is_file():
        frame = history.read_table(table, required=("op", "shape", "impl", "kernel_time_us"), numbers=KERNEL_TIME_NUMBERS)
        prov = history.read_provenance(ns_dir)
        return Side(ns_dir.name, frame, _rounds(ns_dir), _torch_version(ns_dir), _gpus(prov), _session(prov))
    if (ns_dir / "summary.json").is_file():
        return _from_summary(ns_dir / "summary.json")
    raise EvidenceError(f"compare: {ns_dir.name} has no tables/kernel_time.csv and no summary.json.")


def _interval(row: dict[str, Any]) -> tuple[float, float] | None:
    """A kernel time's own interval (lo, hi), where the row gives one with lo > 0."""
    try:
        lo, hi = float(row["kernel_time_lo_us"]), float(row["kernel_time_hi_us"])
    except (KeyError, TypeError, ValueError):
        return None
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi else None


def _rounds(ns_dir: Path) -> dict[tuple[str, str, str], list[float]]:
    path = table_files.table_path(ns_dir / "tables", "rounds")
    if not path.is_file():
        return {}
    frame = history.read_table(path, required=("op", "shape", "impl", "round", "kernel_time_us"),
                               numbers=("round", "kernel_time_us"))
    return {(str(op), str(shape), str(impl)): [float(v) for v in grp.sort_values("round")["kernel_time_us"] if not pd.isna(v)]
            for (op, shape, impl), grp in frame.groupby(["op", "shape", "impl"], sort=False)}


def _torch_version(ns_dir: Path) -> str | None:
    version = (history.read_provenance(ns_dir).get("versions") or {}).get("torch")
    return str(version) if version else None


def compare_frames(a: pd.DataFrame, b: pd.DataFrame, library_comparable: bool,
                   a_rounds: dict[tuple[str, str, str], list[float]] | None = None,
                   b_rounds: dict[tuple[str, str, str], list[float]] | None = None,
                   margin: float = stats.MARGIN, a_gpus: dict[str, str] | None = None,
                   b_gpus: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per (op, shape, impl) in both kernel-time tables, in A's order. `a_gpus`, `b_gpus`:
    each side's GPU models by UUID (Side.gpus), which decide whether a row of two GPUs keeps its ratio."""
    keys = ["op", "shape", "impl"]
    b_rows = {tuple(str(r[k]) for k in keys): r for r in row_dicts(b)}
    out: list[dict[str, Any]] = []
    for ra in row_dicts(a):
        key = cast(tuple[str, str, str], tuple(str(ra[k]) for k in keys))  # keys has three names
        rb = b_rows.get(key)
        if rb is None:
            continue
        a_us, b_us = float(ra["kernel_time_us"]), float(rb["kernel_time_us"])
        row: dict[str, Any] = dict(zip(keys, key), a_us=a_us, b_us=b_us, b_over_a=b_us / a_us if a_us > 0 else None,
                                   change_pct=100.0 * (b_us / a_us - 1.0) if a_us > 0 else None,
                                   b_over_a_lo=None, b_over_a_hi=None, verdict=None, interval="", reason="")
        ka, kb = (a_rounds or {}).get(key), (b_rounds or {}).get(key)
        if not derive.same_gpu(ra, rb):
            ga, gb = uuid_key(ra.get("gpu_uuid")), uuid_key(rb.get("gpu_uuid"))
            ma, mb = (a_gpus or {}).get(ga or ""), (b_gpus or {}).get(gb or "")
            if ma is not None and ma == mb:
                row["reason"] = f"{ONE_MODEL} ({shown(ma, 60)}): the ratio only, no verdict"
            else:
                row.update(b_over_a=None, change_pct=None)
                row["reason"] = (f"measured on different GPUs (A: {shown(ma or 'model not recorded', 60)} GPU-{shown(ga, 40)}; "
                                 f"B: {shown(mb or 'model not recorded', 60)} GPU-{shown(gb, 40)}): no ratio and no verdict")
        elif key[2] in LIBRARY_IMPLS and not library_comparable:
            row["reason"] = "library baseline: compared only on one GPU with one torch version"
        elif ka and kb:
            ratio, lo, hi = stats.ratio_interval(kb, ka, paired=False, seed=stats.seed_of(*key))
            row.update(b_over_a=ratio, b_over_a_lo=lo, b_over_a_hi=hi, verdict=stats.verdict(lo, hi, margin),
                       interval="bootstrap over rounds")
        elif (ia := _interval(ra)) and (ib := _interval(rb)):
            lo, hi = ib[0] / ia[1], ib[1] / ia[0]
            row.update(b_over_a_lo=lo, b_over_a_hi=hi, verdict=stats.verdict(lo, hi, margin),
                       interval="the two kernel-time intervals")
        else:
            env_lo, env_hi = derive.envelope_interval(rb, ra)
            if env_lo is None:
                row["reason"] = "no rounds and no launch spread in one of the tables"
            else:
                assert env_hi is not None  # envelope_interval gives both bounds or neither
                verdict = stats.FASTER if env_hi < 1 else stats.SLOWER if env_lo > 1 else stats.CANT_TELL
                row.update(b_over_a_lo=env_lo, b_over_a_hi=env_hi, verdict=verdict, interval="envelope of the launches")
        out.append(row)
    return pd.DataFrame(out, columns=COMPARE_COLUMNS)


def compare_namespaces(a: str, b: str, artifacts: str | Path = ROOT / "artifacts",
                       margin: float = stats.MARGIN) -> pd.DataFrame:
    """compare_frames over two sides (`side`: namespaces under `artifacts` or summary files)."""
    return compare_sides(side(a, artifacts), side(b, artifacts), margin)


def compare_sides(sa: Side, sb: Side, margin: float = stats.MARGIN) -> pd.DataFrame:
    return compare_frames(sa.kernel_time, sb.kernel_time, library_comparable=sa.torch is not None and sa.torch == sb.torch,
                          a_rounds=sa.rounds, b_rounds=sb.rounds, margin=margin, a_gpus=sa.gpus, b_gpus=sb.gpus)


def _gpu_text(sd: Side) -> str:
    uuids = sorted({k for k in (uuid_key(u) for u in sd.kernel_time.get("gpu_uuid", pd.Series(dtype=object))) if k}
                   | set(sd.gpus))
    if not uuids:
        return "GPU not recorded"
    return ", ".join(f"{shown(sd.gpus.get(u, 'model not recorded'), 60)} (GPU-{shown(u, 40)})" for u in uuids)


SESSIONS = ("These are two sessions: a ratio across sessions is not a same-session verdict (at the 1-3% a kernel "
            "change moves, the difference between two sessions is as large); for a verdict on a change, measure both "
            "builds in one run, in the same session as the control: snakemake --cores 1 report --config "
            "baseline=<revision>.")


def context(sa: Side, sb: Side) -> list[str]:
    """The lines above the table: each side's session and GPUs, and what a cross-session ratio is."""
    return [f"A: {shown(sa.name, 80)}, {sa.session}, on {_gpu_text(sa)}.",
            f"B: {shown(sb.name, 80)}, {sb.session}, on {_gpu_text(sb)}.", SESSIONS]


def summary(frame: pd.DataFrame, a: str, b: str) -> str:
    """One sentence: how many rows were compared, their verdicts, the largest move."""
    judged = frame[frame["verdict"].notna()]
    ratios = int(frame["reason"].astype(str).str.startswith(ONE_MODEL).sum())
    only = (f" {ratios} ratio{'s' if ratios != 1 else ''} without a verdict (two GPUs of one model)."
            if ratios else "")
    if judged.empty:
        return f"{b} against {a}: no (operation, shape, implementation) could be given a verdict.{only}"
    counts = ", ".join(f"{int((judged['verdict'] == v).sum())} {v}" for v in stats.VERDICTS)
    worst = judged.loc[judged["change_pct"].abs().idxmax()]
    text = (f"{b} against {a}: {len(judged)} kernel times compared ({counts}); the largest change is "
            f"{worst['change_pct']:+.1f}% ({worst['op']} {worst['shape']} {worst['impl']}: {worst['a_us']:.2f} -> "
            f"{worst['b_us']:.2f} us, {worst['verdict']}).")
    skipped = len(frame) - len(judged) - ratios
    return text + only + (f" {skipped} not compared (see reason)." if skipped else "")


def markdown(frame: pd.DataFrame) -> str:
    lines = ["| operation | shape | impl | A µs | B µs | change | B/A interval | verdict |",
             "|---|---|---|---:|---:|---:|---|---|"]
    for r in row_dicts(frame):
        interval = (f"{r['b_over_a_lo']:.3f}–{r['b_over_a_hi']:.3f}" if r["b_over_a_lo"] is not None
                    and not pd.isna(r["b_over_a_lo"]) else "")
        change = "" if r["change_pct"] is None or pd.isna(r["change_pct"]) else f"{r['change_pct']:+.1f}%"
        lines.append(f"| {shown(r['op'])} | {shown(r['shape'])} | {shown(r['impl'])} | {r['a_us']:.2f} | {r['b_us']:.2f} | "
                     f"{change} | {interval} | {r['verdict'] if isinstance(r['verdict'], str) else r['reason']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness compare", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog="Rows of two GPUs get no verdict; across sessions a ratio is not a same-session verdict: "
               "for a verdict on a change, measure both builds in one run "
               "(snakemake --cores 1 report --config baseline=<revision>).")
    parser.add_argument("a", help="the earlier namespace, or a summary.json")
    parser.add_argument("b", help="the namespace (or summary.json) compared with it")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"), help="the folder holding the namespaces")
    parser.add_argument("--margin", type=float, default=stats.MARGIN, help="equivalence margin of 'same' (0.01: 1%%)")
    parser.add_argument("--out", help="also write the rows to this CSV (never under artifacts/, report/, the code or "
                                      "the config; an existing file only with --force)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    if not (math.isfinite(args.margin) and 0 <= args.margin < 1):
        raise EvidenceError(f"compare: --margin {args.margin} is not a fraction in [0, 1) (0.01 is 1%).")
    out = check_out(args.out, "compare", force=args.force) if args.out else None
    sa, sb = side(args.a, args.artifacts), side(args.b, args.artifacts)
    frame = compare_sides(sa, sb, args.margin)
    if out is not None:
        write_csv(row_dicts(frame), COMPARE_COLUMNS, out)
    for line in context(sa, sb):
        print(line)
    print()
    print(markdown(frame))
    print()
    print(summary(frame, sa.name, sb.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
