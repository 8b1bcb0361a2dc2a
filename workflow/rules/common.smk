# Configuration (validated at load), paths and the preflight that stops a run needing a GPU
# on a machine without one, in one sentence, before any job starts.
import re
import sys
from pathlib import Path
from snakemake.exceptions import WorkflowError

# The harness package is installed by the set-up command (pip install -e .); the line below
# lets the Snakefile itself load from a bare checkout too.
sys.path.insert(0, workflow.basedir)

from harness import config as hconfig  # noqa: E402
from harness.gpu import preflight  # noqa: E402
from harness.errors import ConfigError  # noqa: E402

try:
    CFG = hconfig.validate(config)
except ConfigError as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)

# GPU jobs declare resources gpu=1; unless the command line or a profile set a gpu limit,
# allow one, so no two GPU jobs ever overlap whatever --cores says.
if "gpu" not in workflow.global_resources:
    workflow.register_resource("gpu", 1)

NS = hconfig.resolve_namespace(CFG, workflow.basedir)
CFG["namespace"] = NS
try:
    from harness.tables.trust import check_earlier

    check_earlier(Path(workflow.basedir) / "artifacts", NS, CFG["trust"]["earlier"])
except ConfigError as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)
# An event span times the launch path on the CPU as well as the kernels: beside other jobs (imports,
# exports, nsys post-processing) it came out up to 1.56x longer on the H200 (h200-ops-1, gpu=3,
# against h200-ops-solo-1). Locally a span job therefore takes every core, so it runs alone; under
# a cluster executor its group holds an allocation of its own.
def _span_threads():
    if not (CFG["span"]["exclusive"] and workflow.local_exec):
        return 1
    try:
        return workflow.cores
    except WorkflowError:  # a job run by a cluster executor, where no total of cores is set
        return 1


SPAN_THREADS = _span_threads()
A = f"artifacts/{NS}"
OPS = list(CFG["operations"])


def impls_of(op):
    """The implementations compared for an operation (its own list, else the top-level one)."""
    return hconfig.implementations(CFG, op)


def built_impls_of(op):
    """Those with a build and census: ours and external ones; the library call has none."""
    return [i for i in impls_of(op) if i != "torch"]


ALL_IMPLS = sorted({i for op in OPS for i in impls_of(op)})


wildcard_constraints:
    op="|".join(OPS),
    impl="|".join(re.escape(i) for i in ALL_IMPLS),
    shape=r"[0-9]+(x[0-9]+)+(-[a-z]+)?",


def shapes_of(op):
    return hconfig.shapes(CFG, op)


def counter_parts():
    """The counters table of every (op, shape, impl) the config asks counters for: each
    operation's default shape, or every shape with counters.shapes: all; none when disabled."""
    c = CFG["counters"]
    if not c["enabled"]:
        return []
    return [
        f"{A}/counters/{op}/{shape}/{impl}.csv"
        for op in OPS
        for shape in (shapes_of(op) if c["shapes"] == "all" else [CFG["operations"][op]["default"]])
        for impl in impls_of(op)
    ]


def census_of(wildcards):
    """The check of one of our kernels waits for its build (and census)."""
    if wildcards.impl in built_impls_of(wildcards.op):
        return [f"{A}/build/{wildcards.op}/{wildcards.impl}/census.json"]
    return []


onstart:
    # Only where the jobs run here: under a cluster executor (profiles/slurm, kubernetes)
    # this process runs on a login or client machine without a GPU, and the jobs get theirs from
    # the cluster.
    if workflow.local_exec:
        preflight.before_jobs(workflow.dag.needrun_jobs(), CFG)
    preflight.record_command(f"{A}/logs/commands.txt")


def trust_inputs():
    """The other namespaces' retained tables the control bands and drift read (committed files)."""
    from harness.tables import trust

    return trust.retained_inputs("artifacts", NS)
