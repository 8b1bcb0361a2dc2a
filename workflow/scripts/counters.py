from pathlib import Path

from harness import config as hconfig
from harness.jobs import run_step
from harness.measure import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params


def group_of(path: str, suffix: str) -> tuple[str, str]:
    """(op, shape) of .../<op>/<shape>/record.json or .../<op>/<shape><suffix>."""
    f = Path(path)
    return (f.parent.parent.name, f.parent.name) if f.name == "record.json" else (f.parent.name, f.name.removesuffix(suffix))


records = {group_of(f, ""): f for f in sm.input.records}
raws = {group_of(f, ".raw.csv"): f for f in sm.output if f.endswith(".raw.csv")}
tables = {group_of(f, ".csv"): f for f in sm.output if f.endswith(".csv") and not f.endswith(".raw.csv")}
groups = [{**g, "record": records[(g["op"], g["shape"])], "raw": raws[(g["op"], g["shape"])],
           "table": tables[(g["op"], g["shape"])]} for g in p.groups]
report = str(Path(next(iter(raws.values()))).parent.parent / "session.ncu-rep")  # artifacts/<ns>/counters/
run_step(sm.log[0], lambda: step.counters_session(groups=groups, metrics=dict(p.metrics), namespace=p.namespace,
                                                  report=report, log=sm.log[0],
                                                  settings=hconfig.operational(hconfig.validate(sm.config))))
