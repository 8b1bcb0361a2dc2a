# The measure stage: everything that runs on the GPU. A measurement group is every implementation
# of one (operation, shape); a measurement session is every group of the run, measured by one
# job `measure` in one process under nsys (each group checked, timed by spans and cross-checks,
# then every group's rounds captured in one profiler range), and their counters by one job
# `counters` in one ncu process. Both carry group gpu-session, so on a cluster the session is one
# job holding one GPU, and on one host the lock in harness/gpu/lock.py keeps both on the session's
# GPU. Each declares resources gpu=1 and the default profile allows one at a time.
# The session loads the cubins the build left (harness/launch/modules.py; builds run first, by
# their priority) and compiles through CuPy what it finds none for, so it does not wait for the
# build: an edit of any operation's sources reruns the session, and a shape added reruns it too.


rule measure:
    input:
        baselines=baseline_sources(),
    output:
        [f for op, shape in session_groups() for f in group_outputs(op, shape)],
    log:
        f"{A}/logs/measure/session.log",
    benchmark:
        f"{A}/benchmarks/measure/session.tsv"
    group:
        "gpu-session"
    threads: SPAN_THREADS
    resources:
        gpu=1,
    params:
        sources={op: hops.source_digest(op, workflow.basedir) for op in OPS},
        groups=session_plans(),
    script:
        "../scripts/measure.py"


if counter_groups():

    rule counters:
        input:
            records=[
                f"{A}/measure/{op}/{shape}/record.json"
                for op, shape in counter_groups()
            ],
        output:
            [
                f"{A}/counters/{op}/{shape}{suffix}"
                for op, shape in counter_groups()
                for suffix in (".raw.csv", ".csv")
            ],
        log:
            f"{A}/logs/counters/session.log",
        benchmark:
            f"{A}/benchmarks/counters/session.tsv"
        group:
            "gpu-session"
        resources:
            gpu=1,
        params:
            groups=counters_plans(),
            metrics=CFG["counters"]["metrics"],
            namespace=NS,
        script:
            "../scripts/counters.py"


rule ceilings:
    output:
        table=f"{A}/tables/ceilings.csv",
    log:
        f"{A}/logs/ceilings.log",
    benchmark:
        f"{A}/benchmarks/ceilings.tsv"
    resources:
        gpu=1,
    params:
        same_size=hconfig.same_size_bytes(CFG),
        cache_mode=CFG["cache_mode"],
    script:
        "../scripts/ceilings.py"
