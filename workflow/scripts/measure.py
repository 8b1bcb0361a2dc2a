from pathlib import Path

from harness import config as hconfig
from harness.jobs import run_step
from harness.measure import step

sm = snakemake  # noqa: F821 (injected by Snakemake)
# each group's folder, artifacts/<ns>/measure/<op>/<shape>/, is where its record.json is written
folders = {(Path(o).parent.parent.name, Path(o).parent.name): Path(o).parent for o in sm.output if o.endswith("/record.json")}
groups = [{**g, "group_dir": folders[(g["op"], g["shape"])]} for g in sm.params.groups]
run_step(sm.log[0], lambda: step.measure_session(groups=groups, session_dir=next(iter(folders.values())).parents[1],
                                                 log=sm.log[0],
                                                 settings=hconfig.operational(hconfig.validate(sm.config)),
                                                 exclusive=sm.threads >= int(sm.resources.get("_cores", sm.threads)),
                                                 threads=sm.threads))
