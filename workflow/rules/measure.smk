# The measure stage: everything that runs on the GPU. A measurement group is every implementation
# of one (operation, shape): one job `measure` checks, captures and times them in one process, and
# `counters` reads their hardware counters; both carry group gpu-<op>-<shape>, so on a cluster the
# group is one job holding one GPU, and on one host the lock in harness/gpu/lock.py keeps both on
# the group's GPU. Each declares resources gpu=1 and the default profile allows one at a time.
# A group loads the cubins the build left (harness/launch/modules.py; builds run first, by their
# priority) and compiles through CuPy what it finds none for, so it does not wait for the build: an
# edit of the operation's sources reruns both, and a shape added to the operation reruns the build
# but no finished group.


rule measure:
    input:
        baselines=baseline_sources(),
    output:
        record=f"{A}/measure/{{op}}/{{shape}}/record.json",
        launches=f"{A}/measure/{{op}}/{{shape}}/launches.csv",
        spans=f"{A}/measure/{{op}}/{{shape}}/spans.csv",
        graph=f"{A}/measure/{{op}}/{{shape}}/graph.csv",
    log:
        f"{A}/logs/measure/{{op}}/{{shape}}.log",
    benchmark:
        f"{A}/benchmarks/measure/{{op}}/{{shape}}.tsv"
    group:
        "gpu-{op}-{shape}"
    threads: SPAN_THREADS
    resources:
        gpu=1,
    params:
        sources=sources_of,
        impls=lambda wc: impls_of(wc.op),
        plan=lambda wc: hconfig.measure_plan(CFG, wc.op),
    script:
        "../scripts/measure.py"


rule counters:
    input:
        record=f"{A}/measure/{{op}}/{{shape}}/record.json",
    output:
        raw=f"{A}/counters/{{op}}/{{shape}}.raw.csv",
        table=f"{A}/counters/{{op}}/{{shape}}.csv",
    log:
        f"{A}/logs/counters/{{op}}/{{shape}}.log",
    benchmark:
        f"{A}/benchmarks/counters/{{op}}/{{shape}}.tsv"
    group:
        "gpu-{op}-{shape}"
    resources:
        gpu=1,
    params:
        impls=lambda wc: impls_of(wc.op),
        plan=lambda wc: hconfig.counters_plan(CFG, wc.op),
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
