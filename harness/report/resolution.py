"""What the reports say of the pipeline's own resolution: ours against variants whose answer is
known before the run. An A/A twin is the base kernel under another name, no define changed
("same" expected); a variant of the same binary is one whose defines leave the kernels serving a
shape as they were, so that it runs its base's code there, its SASS instruction for instruction
(the census says so, harness.tables.binaries): an A/A pair that no one planted ("same"
expected); a planted slowdown is the base kernel on a problem `grow` larger whose extra part
leaves the output as it is, or with every block waiting `delay` clock cycles after its work
("slower" expected, by the size the replay measures). Where a run measures such
variants (workflow/configs/resolution.yaml), the field note and the page give them a section of
their own and summary.json carries the same rows under `resolution`.

The figures come from two tables: variants.csv (each variant over its base in the same rounds:
the ratio, its interval and the verdict) and cross_check.csv (each implementation's CUDA-graph
replay in the same group, and where the run asked for it its idle-start timing: timers
independent of Nsight Systems). A plant's size measured another way is, where the idle starts
were timed, its extra time per call by idle-start events over its base's time per call by graph
replay (`idle_ratio`: the idle starts time each call as the capture runs it, on an idle GPU,
harness.measure.idle_start); else the replay ratio, the variant's replay median over its base's,
which at kernels of a few microseconds times them another way (back to back). Neither exists
where the run's cross-check was off. Where the idle starts were timed, the capture's size of a
plant (its ratio) must agree with theirs to within the verdicts' margin (`alike`): the two time
the calls the same way, so a larger difference says the capture sizes a change wrongly. The role
of a variant is read from its definition in the run's config, else, shape by shape, from the
census. `rows` is what summary.json holds (numbers as numbers); `context` what the templates
print."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.report.words import number, pct, ratio_text, records, sentence, text
from harness.tables import binaries, stats

SAME_BINARY = "same binary"
"""The role of a variant tried for its own sake at a shape where it runs its base's code."""

EXPECTED = {"A/A twin": "same", SAME_BINARY: "same", "planted slowdown": "slower"}
"""Each known-answer role and the verdict a right measurement gives it."""

PLURAL = {"A/A twin": "A/A twins", SAME_BINARY: "variants of the same binary", "planted slowdown": "planted slowdowns"}

SIZED = (0.02, 0.03)
"""The size a planted slowdown is calibrated to (variant/base - 1, both ends included), measured
another way than the verdict (module docstring): a plant whose size falls outside proves nothing
about a 2% step."""


BELOW_MARGIN = "same or slower"
"""What a planted slowdown expects where its size measured another way is below the verdicts'
margin: a change that small is "same" by the verdict's definition, and "slower" where the interval
is narrow enough to see it; only "faster" is wrong (a plant-sizes run's smallest candidates)."""


def margin(cfg: Mapping[str, Any]) -> float:
    """The verdicts' margin of the run's config (verdict.margin), stats.MARGIN where it names none."""
    return float((cfg.get("verdict") or {}).get("margin") or stats.MARGIN)


def below_margin(role_: str, ratio: float | None, margin: float) -> bool:
    """Whether a planted slowdown's size measured another way (variant/base as `ratio`) is below
    `margin`, so that "same" is a right verdict for it."""
    return role_ == "planted slowdown" and ratio is not None and ratio - 1.0 < margin


def sized(role_: str, ratio: float | None) -> bool | None:
    """Whether a planted slowdown's size measured another way (variant/base as `ratio`) lies
    within SIZED; None for an A/A twin or where it was not timed."""
    if role_ != "planted slowdown" or ratio is None:
        return None
    return SIZED[0] <= round(ratio - 1.0, 6) <= SIZED[1]


def alike(role_: str, ratio: float | None, idle: float | None, margin: float) -> bool | None:
    """Whether a planted slowdown's size by the capture (variant/base kernel time, `ratio`) and by
    idle starts (`idle`) differ by at most `margin` (the verdicts' margin: a smaller difference
    cannot turn a verdict by itself); None for an A/A pair or where either was not measured."""
    if role_ != "planted slowdown" or ratio is None or idle is None:
        return None
    return round(abs(ratio - idle), 6) <= margin


def role(definition: Any) -> str | None:
    """The role of a variant by its config definition: 'planted slowdown' where it grows the
    problem, 'A/A twin' where it changes nothing (no define, no growth), else None (a variant tried
    for its own sake)."""
    if not isinstance(definition, Mapping):
        return None
    if number(definition.get("grow")) or number(definition.get("delay")):
        return "planted slowdown"
    return None if definition.get("defines") else "A/A twin"


def known(cfg: Mapping[str, Any]) -> dict[tuple[str, str], tuple[str, float | None, float | None]]:
    """(op, variant implementation '<base>.<name>') -> (its role, its planted growth or None, its
    planted delay in cycles or None), for every variant of the config that has a role."""
    out: dict[tuple[str, str], tuple[str, float | None, float | None]] = {}
    for op, spec in (cfg.get("operations") or {}).items():
        for name, definition in ((spec or {}).get("variants") or {}).items() if isinstance(spec, Mapping) else ():
            said = role(definition)
            if said is not None:
                out[(str(op), f"{definition.get('base', 'cuda')}.{name}")] = (said, number(definition.get("grow")),
                                                                             number(definition.get("delay")))
    return out


def _timings(cross: Any) -> dict[tuple[str, str, str], tuple[float, float | None]]:
    """(op, shape, impl) -> (the graph replay's median µs per call, the idle-start median µs per
    call or None), where the replay was timed."""
    out = {}
    for r in records(cross):
        median = number(r.get("graph_median_us"))
        if text(r.get("status")) == "ok" and median:
            out[(str(r.get("op")), str(r.get("shape")), str(r.get("impl")))] = (median, number(r.get("idle_median_us")))
    return out


def sizes(mine: tuple[float, float | None] | None,
          theirs: tuple[float, float | None] | None) -> tuple[float | None, float | None]:
    """(replay ratio, idle ratio) of a variant over its base from their (graph, idle) timings:
    graph / graph, and 1 + (idle - idle) / the base's graph (module docstring); None where a
    timing is missing."""
    if not mine or not theirs:
        return None, None
    replayed = mine[0] / theirs[0]
    idle = 1.0 + (mine[1] - theirs[1]) / theirs[0] if mine[1] is not None and theirs[1] is not None else None
    return replayed, idle


def rows(cfg: Mapping[str, Any], variants: Any, cross: Any, census: Any = None) -> list[dict[str, Any]]:
    """summary.json's `resolution`: one object per (op, shape, known-answer variant), in the
    variants table's order: {op, shape, variant, base, role, expected, ratio, lo, hi, verdict,
    as_expected, planted_growth, planted_delay_cycles, replay_ratio, idle_ratio, replay_sized,
    size_alike, below_margin}: `replay_sized` says (`sized`) whether the plant's size measured another way,
    `idle_ratio` where the idle starts were timed, else `replay_ratio`, lies within SIZED;
    `size_alike` whether the capture's ratio and `idle_ratio` agree (`alike`, within the margin);
    `below_margin` whether that size is below the verdicts' margin (the config's verdict.margin),
    where the plant expects BELOW_MARGIN. A variant of no role in the
    config is one (SAME_BINARY) at each shape where the census shows it runs its base's code
    (harness.tables.binaries)."""
    roles, timings = known(cfg), _timings(cross)
    band = margin(cfg)
    twins = binaries.identical_variants(binaries.serving(census), variants)
    out = []
    for r in records(variants):
        op, shape, variant, base = (str(r.get(k)) for k in ("op", "shape", "variant", "base"))
        if (op, variant) in roles:
            said, growth, delay = roles[(op, variant)]
        elif (op, shape, variant) in twins:
            said, growth, delay = SAME_BINARY, None, None
        else:
            continue
        verdict = text(r.get("verdict"))
        verdict = verdict if verdict in stats.VERDICTS else None
        replayed, idle = sizes(timings.get((op, shape, variant)), timings.get((op, shape, base)))
        size = idle if idle is not None else replayed
        small = below_margin(said, size, band)
        out.append({"op": op, "shape": shape, "variant": variant, "base": base, "role": said,
                    "expected": BELOW_MARGIN if small else EXPECTED[said], "ratio": number(r.get("ratio")),
                    "lo": number(r.get("ratio_lo")), "hi": number(r.get("ratio_hi")), "verdict": verdict,
                    "as_expected": verdict in (stats.SAME, stats.SLOWER) if small else verdict == EXPECTED[said],
                    "planted_growth": growth, "planted_delay_cycles": int(delay) if delay else None,
                    "replay_ratio": replayed, "idle_ratio": idle, "replay_sized": sized(said, size),
                    "size_alike": alike(said, number(r.get("ratio")), idle, band), "below_margin": small})
    return out


def role_counts(mine: list[dict[str, Any]]) -> dict[str, int]:
    """How many of one role's rows (`rows`) there are and came out as expected, apart above and
    below the margin, how many of them the replays timed and sized, and how many the capture and
    the idle starts both sized and sized alike."""
    above = [r for r in mine if not r["below_margin"]]
    below = [r for r in mine if r["below_margin"]]
    return {"pairs": len(above), "as_expected": sum(bool(r["as_expected"]) for r in above),
            "below": len(below), "below_as_expected": sum(bool(r["as_expected"]) for r in below),
            "sized": sum(r["replay_sized"] is True for r in mine),
            "replayed": sum(r["replay_sized"] is not None for r in mine),
            "alike": sum(r.get("size_alike") is True for r in mine),
            "compared": sum(r.get("size_alike") is not None for r in mine)}


def context(cfg: Mapping[str, Any], variants: Any, cross: Any, census: Any = None) -> dict[str, Any] | None:
    """The templates' `resolution`: None where the run measured no known-answer variant; else
    its rows as text, and per role how many came out as expected."""
    found = rows(cfg, variants, cross, census)
    if not found:
        return None
    counts = {said: role_counts([r for r in found if r["role"] == said]) for said in EXPECTED}
    shown = []
    for r in found:
        replay = r["replay_ratio"]
        shown.append({**r, "ratio_text": ratio_text(r["ratio"], r["lo"], r["hi"]), "verdict_text": r["verdict"] or "no verdict",
                      "growth_text": (f"+{pct(r['planted_growth'])}" if r["planted_growth"] else
                                      f"delay {r['planted_delay_cycles']} cycles" if r["planted_delay_cycles"] else "none"),
                      "replay_text": f"{replay:.3f}" if replay is not None else "not timed",
                      "idle_text": f"{r['idle_ratio']:.3f}" if r["idle_ratio"] is not None else "not timed",
                      "sized_text": "" if r["role"] != "planted slowdown" else
                      "not timed" if r["replay_sized"] is None else "yes" if r["replay_sized"] else "NO",
                      "alike_text": "" if r["role"] != "planted slowdown" else
                      "not timed" if r["size_alike"] is None else
                      f"{(r['ratio'] - r['idle_ratio']) * 100:+.2f} pt" + ("" if r["size_alike"] else ", NO"),
                      "as_expected_text": "yes" if r["as_expected"] else "NO"})
    return {"rows": shown, "counts": [{"role": said, **counts[said], "expected": EXPECTED[said]} for said in EXPECTED
                                      if counts[said]["pairs"] or counts[said]["below"]],
            "margin": margin(cfg),
            "same_binary": any(r["role"] == SAME_BINARY for r in found),
            "replayed": any(r["replay_ratio"] is not None for r in found),
            "idle": any(r["idle_ratio"] is not None for r in found)}


def checked(found: list[dict[str, Any]]) -> str | None:
    """The clause a report without flags says of the known answers it checked ('no known answer
    wrong (3 A/A pairs, 2 planted slowdowns)'), or None where the session had none."""
    pairs = sum(EXPECTED[r["role"]] == stats.SAME for r in found)
    plants = sum(EXPECTED[r["role"]] == stats.SLOWER for r in found)
    said = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in ((pairs, "A/A pair"), (plants, "planted slowdown")) if n]
    return f"no known answer wrong ({', '.join(said)})" if said else None


def flags(found: list[dict[str, Any]]) -> list[str]:
    """The flag lines of the known answers this session got wrong (`rows`): A/A pairs (twins and
    variants of the same binary) that came out "faster" or "slower", which say its verdicts have a
    bias as large as their ratios; planted slowdowns that came out "same" or "faster", which say it
    can call a change of their size no change, or the wrong way (unless `as_expected` says otherwise:
    "same" is right for a plant sized below the margin, `below_margin`); planted slowdowns whose size
    by the capture and by idle starts differ by more than the margin (`size_alike` False), which
    say it sizes a change wrongly whatever its verdict. "Can't tell" is no flag either way: the
    interval straddled the margin, and the verdict said so."""
    pairs = [r for r in found if EXPECTED[r["role"]] == stats.SAME]
    plants = [r for r in found if EXPECTED[r["role"]] == stats.SLOWER]
    out = []
    for mine, missed, what, meaning in (
            (pairs, [r for r in pairs if r["verdict"] in (stats.FASTER, stats.SLOWER)], "A/A pairs came out faster or slower",
             "so a verdict of this session no further from 1 than these ratios may be its own bias"),
            (plants, [r for r in plants if r["verdict"] in (stats.SAME, stats.FASTER) and not r["as_expected"]],
             "planted slowdowns came out same or faster", "so this session can miss a change of that size")):
        if not missed:
            continue
        where = "; ".join(f"{r['op']} {r['shape']} {r['variant']}: {r['verdict'] or 'no verdict'}, "
                          f"{ratio_text(r['ratio'], r['lo'], r['hi'])}" for r in missed)
        out.append(sentence(f"Known answers: {len(missed)} of {len(mine)} {what} ({where}), {meaning}"))
    compared = [r for r in plants if r.get("size_alike") is not None]
    unlike = [r for r in compared if r["size_alike"] is False]
    if unlike:
        where = "; ".join(f"{r['op']} {r['shape']} {r['variant']}: {ratio_text(r['ratio'], r['lo'], r['hi'])} "
                          f"by the capture, {r['idle_ratio']:.3f} by idle starts" for r in unlike)
        out.append(sentence(f"Known answers: {len(unlike)} of {len(compared)} planted slowdowns were sized unlike the "
                            f"idle starts, beyond the verdicts' margin ({where}), so this session's ratios may be off "
                            f"by as much"))
    return out
