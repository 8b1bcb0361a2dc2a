# Everything that runs on the GPU: the check, the Nsight Systems capture, the Nsight Compute
# counters and the event spans.
# Each declares resources gpu=1 and the default profile allows one at a time.
# The evidence rule: the jobs whose figures are compared with each other (the checks and captures
# of every implementation of one operation and shape, and its span) form one group,
# gpu-<op>-<shape>. On a cluster Snakemake submits a group as one job with one GPU (the profiles in
# profiles/ give each submitted job gpu=1 and merge the pieces of a group); on one host
# with several GPUs the lock in harness/gpu/lock.py keeps every job of a group on the group's GPU.


rule check:
    # Writes the check record whether the check passed or not (a wrong answer stops that
    # implementation alone); a kernel that crashes or hangs fails this job.
    group:
        "gpu-{op}-{shape}"
    input:
        census=census_of,
    output:
        check=f"{A}/check/{{op}}/{{shape}}/{{impl}}.json",
    log:
        f"{A}/logs/check/{{op}}/{{shape}}/{{impl}}.log",
    params:
        cfg=CFG,
    resources:
        gpu=1,
    script:
        "../scripts/check.py"


rule capture:
    # The declared output is the capture's record (meta). When the check passed, the report
    # (<impl>.nsys-rep) and its SQLite export (<impl>.sqlite) are written beside it first, each
    # under a temporary name renamed when complete, so a record implies a complete capture. When the
    # check failed, nothing runs on the GPU and the record says "not measured" with the check's
    # error: the tables and the report list the implementation as failed, with no timing.
    group:
        "gpu-{op}-{shape}"
    input:
        check=f"{A}/check/{{op}}/{{shape}}/{{impl}}.json",
    output:
        meta=f"{A}/capture/{{op}}/{{shape}}/{{impl}}.json",
    log:
        f"{A}/logs/capture/{{op}}/{{shape}}/{{impl}}.log",
    params:
        cfg=CFG,
    resources:
        gpu=1,
    script:
        "../scripts/capture.py"


rule counters:
    # Nsight Compute counters (ncu --clock-control none) of the kernels of the measured calls,
    # after the check passed. The .ncu-rep is kept beside the raw export (same folder, <impl>.ncu-rep).
    group:
        "gpu-{op}-{shape}"
    input:
        check=f"{A}/check/{{op}}/{{shape}}/{{impl}}.json",
    output:
        raw=f"{A}/counters/{{op}}/{{shape}}/{{impl}}.raw.csv",
        table=f"{A}/counters/{{op}}/{{shape}}/{{impl}}.csv",
    log:
        f"{A}/logs/counters/{{op}}/{{shape}}/{{impl}}.log",
    params:
        cfg=CFG,
    resources:
        gpu=1,
    script:
        "../scripts/counters.py"


rule span:
    group:
        "gpu-{op}-{shape}"
    input:
        checks=lambda wc: [f"{A}/check/{wc.op}/{wc.shape}/{impl}.json" for impl in impls_of(wc.op)],
    output:
        samples=f"{A}/span/{{op}}/{{shape}}.samples.csv",
        summary=f"{A}/span/{{op}}/{{shape}}.csv",
        graph=f"{A}/span/{{op}}/{{shape}}.graph.csv",
    log:
        f"{A}/logs/span/{{op}}/{{shape}}.log",
    params:
        cfg=CFG,
        impls=lambda wc: impls_of(wc.op),
    threads: SPAN_THREADS
    resources:
        gpu=1,
    script:
        "../scripts/span.py"


rule ceilings:
    output:
        table=f"{A}/tables/ceilings.csv",
    log:
        f"{A}/logs/ceilings.log",
    params:
        cfg=CFG,
    resources:
        gpu=1,
    script:
        "../scripts/ceilings.py"
