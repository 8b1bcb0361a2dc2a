# Tables: per-capture kernel time (through the nsys reader), per-shape, per-sweep and the
# namespace-wide tables every report figure comes from.


rule kernel_time:
    input:
        meta=f"{A}/capture/{{op}}/{{shape}}/{{impl}}.json",
    output:
        detail=f"{A}/kernel_time/{{op}}/{{shape}}/{{impl}}.csv",
    log:
        f"{A}/logs/kernel_time/{{op}}/{{shape}}/{{impl}}.log",
    params:
        range=CFG["capture"]["range"],
        iterations=CFG["capture"]["iterations"],
    script:
        "../scripts/kernel_time.py"


rule shape_table:
    input:
        details=lambda wc: [f"{A}/kernel_time/{wc.op}/{wc.shape}/{impl}.csv" for impl in impls_of(wc.op)],
        span=f"{A}/span/{{op}}/{{shape}}.csv",
    output:
        table=f"{A}/tables/shape/{{op}}/{{shape}}.csv",
    log:
        f"{A}/logs/tables/shape/{{op}}/{{shape}}.log",
    params:
        cfg=CFG,
    script:
        "../scripts/shape_table.py"


rule sweep:
    input:
        details=lambda wc: [
            f"{A}/kernel_time/{wc.op}/{shape}/{impl}.csv"
            for shape in shapes_of(wc.op)
            for impl in impls_of(wc.op)
        ],
    output:
        table=f"{A}/tables/sweep_{{op}}.csv",
        kernel_time=f"{A}/tables/sweep_{{op}}_kernel_time.csv",
        variants=f"{A}/tables/sweep_{{op}}_variants.csv",
    log:
        f"{A}/logs/tables/sweep_{{op}}.log",
    params:
        cfg=CFG,
    script:
        "../scripts/sweep.py"


rule sweep_provenance:
    input:
        captures=lambda wc: [
            f"{A}/capture/{wc.op}/{shape}/{impl}.json"
            for shape in shapes_of(wc.op)
            for impl in impls_of(wc.op)
        ],
    output:
        provenance=f"{A}/tables/sweep_{{op}}_provenance.json",
    log:
        f"{A}/logs/sweep_provenance_{{op}}.log",
    params:
        cfg=CFG,
    script:
        "../scripts/provenance.py"


for _op in OPS:

    rule:
        name:
            f"sweep_{_op}"
        input:
            table=f"{A}/tables/sweep_{_op}.csv",
            provenance=f"{A}/tables/sweep_{_op}_provenance.json",


rule tables:
    input:
        details=[
            f"{A}/kernel_time/{op}/{shape}/{impl}.csv"
            for op in OPS
            for shape in shapes_of(op)
            for impl in impls_of(op)
        ],
        spans=[f"{A}/span/{op}/{shape}.csv" for op in OPS for shape in shapes_of(op)],
        graphs=[f"{A}/span/{op}/{shape}.graph.csv" for op in OPS for shape in shapes_of(op)],
        checks=[
            f"{A}/check/{op}/{shape}/{impl}.json"
            for op in OPS
            for shape in shapes_of(op)
            for impl in impls_of(op)
        ],
        census=f"{A}/tables/census.csv",
        ceilings=f"{A}/tables/ceilings.csv",
        metas=[
            f"{A}/capture/{op}/{shape}/{impl}.json"
            for op in OPS
            for shape in shapes_of(op)
            for impl in impls_of(op)
        ],
    output:
        kernel_time=f"{A}/tables/kernel_time.csv",
        gpu_state=f"{A}/tables/gpu_state.csv",
        kernel_time_detail=f"{A}/tables/kernel_time_detail.csv",
        span=f"{A}/tables/span.csv",
        check=f"{A}/tables/check.csv",
        sweep=f"{A}/tables/sweep.csv",
        cross_check=f"{A}/tables/cross_check.csv",
        variants=f"{A}/tables/variants.csv",
    log:
        f"{A}/logs/tables/tables.log",
    params:
        cfg=CFG,
    script:
        "../scripts/tables.py"


rule counters_table:
    input:
        parts=counter_parts(),
    output:
        table=f"{A}/tables/counters.csv",
    log:
        f"{A}/logs/tables/counters.log",
    params:
        cfg=CFG,
    script:
        "../scripts/counters_table.py"


rule census_table:
    input:
        census=[f"{A}/build/{op}/{impl}/census.json" for op in OPS for impl in built_impls_of(op)],
    output:
        table=f"{A}/tables/census.csv",
    log:
        f"{A}/logs/tables/census.log",
    params:
        cfg=CFG,
    script:
        "../scripts/census_table.py"


rule trust:
    input:
        kernel_time=f"{A}/tables/kernel_time.csv",
        census=f"{A}/tables/census.csv",
        provenance=f"{A}/provenance.json",
        retained=trust_inputs(),
    output:
        controls=f"{A}/tables/controls.csv",
        drift=f"{A}/tables/drift.csv",
    log:
        f"{A}/logs/tables/trust.log",
    params:
        cfg=CFG,
    script:
        "../scripts/trust.py"
