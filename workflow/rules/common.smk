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
from harness import namespaces, runlog  # noqa: E402
from harness import baseline as hbaseline  # noqa: E402
from harness import ops as hops  # noqa: E402
from harness.gpu import preflight  # noqa: E402
from harness.tables import trust  # noqa: E402
from harness.report import results  # noqa: E402
from harness.errors import ConfigError  # noqa: E402
from harness.tables.derive import TABLES as TABLE_NAMES  # noqa: E402
from harness.tables.table_files import table_file  # noqa: E402

try:
    # each --configfile, as `python -m harness config` reads it
    for given in workflow.overwrite_configfiles:
        hconfig.check_file(given)
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
# Baseline revisions (--config baseline=main): each resolved to its commit now, so a name git does
# not know stops the run in one sentence before any job; a copy without the history (a lent GPU
# machine) takes the sources a checkout with it extracted into the namespace (rule baseline_sources).
try:
    BASELINES = {
        r.label: r
        for r in hbaseline.resolve(
            hconfig.baseline_revisions(CFG),
            Path(workflow.basedir),
            Path(workflow.basedir) / "artifacts" / NS / "baseline",
        )
    }
except ConfigError as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)
try:
    trust.check_earlier(
        Path(workflow.basedir) / "artifacts", NS, CFG["trust"]["earlier"]
    )
except ConfigError as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)


# An event span times the launch path on the CPU as well as the kernels, so a job beside it (imports,
# exports, nsys post-processing) lengthens it. Locally a measure job therefore takes every core and
# runs alone; under a cluster executor its group holds an allocation of its own.
def _span_threads():
    if not (CFG["span"]["exclusive"] and workflow.local_exec):
        return 1
    try:
        return workflow.cores
    except (
        WorkflowError
    ):  # a job run by a cluster executor, where no total of cores is set
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


BUILT_OPS = [op for op in OPS if built_impls_of(op)]
TABLES = TABLE_NAMES


wildcard_constraints:
    op="|".join(OPS),
    shape=r"[0-9]+(x[0-9]+)+(-[a-z]+)?",
    label=r"[A-Za-z0-9._-]+",


def shapes_of(op):
    return hconfig.shapes(CFG, op)


def ceilings_input():
    """The ceilings table as a named input of the rules that read it, or nothing with
    ceilings.enabled false (no ceilings job then; the fractions stay empty)."""
    if not CFG["ceilings"]["enabled"]:
        return {}
    return {"ceilings": f"{A}/tables/ceilings.csv"}


def counter_groups():
    """(op, shape) of every group the config asks counters for: each operation's default shape,
    or every shape with counters.shapes: all; none when disabled."""
    c = CFG["counters"]
    if not c["enabled"]:
        return []
    return [
        (op, shape)
        for op in OPS
        for shape in hconfig.group_shapes(CFG, op, c["shapes"])
    ]


def counter_parts():
    """The counters table of every group counter_groups() names."""
    return [f"{A}/counters/{op}/{shape}.csv" for op, shape in counter_groups()]


def baseline_sources():
    """The kernel sources of every baseline revision (rule baseline_sources)."""
    return [f"{A}/baseline/{label}/COMMIT" for label in BASELINES]


def sources_of(wildcards):
    """The digest of an operation's kernels and host code: an edit reruns its build and groups."""
    return hops.source_digest(wildcards.op, workflow.basedir)


def group_outputs(op, shape):
    """The files one measurement group writes (rule measure)."""
    return [
        f"{A}/measure/{op}/{shape}/{name}"
        for name in ("record.json", "launches.csv", "spans.csv", "graph.csv")
    ]


def session_groups():
    """Every (operation, shape) of the run, in order: the groups of its measurement session."""
    return [(op, shape) for op in OPS for shape in shapes_of(op)]


def session_plans():
    """What the session measures (the measure job): each group's operation, shape, implementations, plan."""
    return [
        {
            "op": op,
            "shape": shape,
            "impls": impls_of(op),
            "plan": hconfig.measure_plan(CFG, op),
        }
        for op, shape in session_groups()
    ]


def counters_plans():
    """What the counters job profiles, per group: its operation, shape, implementations, plan."""
    return [
        {
            "op": op,
            "shape": shape,
            "impls": impls_of(op),
            "plan": hconfig.counters_plan(CFG, op),
        }
        for op, shape in counter_groups()
    ]


RUN_LOG = {"record": True}


onstart:
    # Retained evidence is read-only: a run that would write into it stops here (a dry run, a run
    # with nothing to do, or one whose jobs write only outside it, as the bundle, reads it freely;
    # such a run leaves its commands.jsonl alone too).
    writing = any(
        namespaces.writes_into(NS, job.output, workflow.basedir)
        for job in workflow.dag.needrun_jobs()
    )
    if writing:
        try:
            namespaces.refuse_retained(NS, workflow.basedir, CFG["overwrite"])
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            sys.exit(1)
    RUN_LOG["record"] = writing or not namespaces.retained(NS, workflow.basedir)
    # Only where the jobs run here: under a cluster executor (profiles/slurm, kubernetes)
    # this process runs on a login or client machine without a GPU, and the jobs get theirs from
    # the cluster.
    if workflow.local_exec:
        preflight.before_jobs(workflow.dag.needrun_jobs(), CFG)
    if RUN_LOG["record"]:
        runlog.record_start(
            f"{A}/commands.jsonl", len(list(workflow.dag.needrun_jobs()))
        )


onsuccess:
    if RUN_LOG["record"]:
        runlog.record_end(f"{A}/commands.jsonl", "success")


onerror:
    if RUN_LOG["record"]:
        runlog.record_end(f"{A}/commands.jsonl", "error")


def trust_inputs():
    """The other namespaces' retained tables the control bands and drift read (committed files)."""
    return trust.retained_inputs("artifacts", NS)
