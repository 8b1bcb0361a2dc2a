# The tables stage: the tables every report figure comes from, derived from what the measurement
# groups wrote (harness.tables.derive.namespace_tables, which `verify` calls too).


rule tables:
    input:
        **ceilings_input(),
        groups=[
            f
            for op in OPS
            for shape in shapes_of(op)
            for f in group_outputs(op, shape)
        ],
        census=f"{A}/tables/census.csv",
    output:
        **{
            name: (
                report(
                    f"{A}/tables/{table_file(name)}",
                    caption=results.caption(name),
                    category=results.category(name),
                )
                if name in results.TABLES
                else f"{A}/tables/{table_file(name)}"
            )
            for name in TABLES
        },
    log:
        f"{A}/logs/tables/tables.log",
    benchmark:
        f"{A}/benchmarks/tables.tsv"
    params:
        namespace=NS,
        cache_mode=CFG["cache_mode"],
        descriptions=hconfig.variant_descriptions(CFG),
        cross_check={k: CFG["cross_check"][k] for k in ("rtol", "atol_us_per_kernel")},
        margin=CFG["verdict"]["margin"],
        between_runs=CFG["verdict"].get("between_runs"),
    script:
        "../scripts/tables.py"


rule shape_table:
    input:
        group=lambda wc: group_outputs(wc.op, wc.shape),
    output:
        table=f"{A}/tables/shape/{{op}}/{{shape}}.csv",
    log:
        f"{A}/logs/tables/shape/{{op}}/{{shape}}.log",
    benchmark:
        f"{A}/benchmarks/shape_table/{{op}}/{{shape}}.tsv"
    params:
        namespace=NS,
        cache_mode=CFG["cache_mode"],
        margin=CFG["verdict"]["margin"],
    script:
        "../scripts/shape_table.py"


rule sweep:
    input:
        groups=lambda wc: [
            f for shape in shapes_of(wc.op) for f in group_outputs(wc.op, shape)
        ],
    output:
        table=f"{A}/tables/sweep_{{op}}.csv",
        kernel_time=f"{A}/tables/sweep_{{op}}_kernel_time.csv",
        variants=f"{A}/tables/sweep_{{op}}_variants.csv",
    log:
        f"{A}/logs/tables/sweep_{{op}}.log",
    benchmark:
        f"{A}/benchmarks/sweep/{{op}}.tsv"
    params:
        namespace=NS,
        cache_mode=CFG["cache_mode"],
        descriptions=lambda wc: hconfig.variant_descriptions(CFG)[wc.op],
        margin=CFG["verdict"]["margin"],
        between_runs=CFG["verdict"].get("between_runs"),
    script:
        "../scripts/sweep.py"


rule sweep_provenance:
    input:
        records=lambda wc: [
            f"{A}/measure/{wc.op}/{shape}/record.json" for shape in shapes_of(wc.op)
        ],
    output:
        provenance=f"{A}/tables/sweep_{{op}}_provenance.json",
    log:
        f"{A}/logs/sweep_provenance_{{op}}.log",
    benchmark:
        f"{A}/benchmarks/sweep_provenance/{{op}}.tsv"
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


rule counters_table:
    input:
        parts=counter_parts(),
    output:
        table=f"{A}/tables/counters.csv",
    log:
        f"{A}/logs/tables/counters.log",
    benchmark:
        f"{A}/benchmarks/counters_table.tsv"
    params:
        metrics=CFG["counters"]["metrics"],
    script:
        "../scripts/counters_table.py"


rule trust:
    input:
        kernel_time=f"{A}/tables/kernel_time.csv",
        census=f"{A}/tables/census.csv",
        gpu_state=f"{A}/tables/gpu_state.csv",
        provenance=f"{A}/provenance.json",
        retained=trust_inputs(),
    output:
        controls=report(
            f"{A}/tables/controls.csv",
            caption=results.caption("controls"),
            category=results.category("controls"),
        ),
        drift=report(
            f"{A}/tables/drift.csv",
            caption=results.caption("drift"),
            category=results.category("drift"),
        ),
    log:
        f"{A}/logs/tables/trust.log",
    benchmark:
        f"{A}/benchmarks/trust.tsv"
    params:
        namespace=NS,
        control=CFG["trust"]["control"],
        margin=CFG["trust"]["margin"],
        earlier=CFG["trust"]["earlier"],
    script:
        "../scripts/trust.py"


rule targets:
    input:
        sweep=f"{A}/tables/sweep.csv",
        kernel_time=f"{A}/tables/kernel_time.csv",
        span=f"{A}/tables/span.csv",
        controls=f"{A}/tables/controls.csv",
    output:
        targets=report(
            f"{A}/tables/targets.csv",
            caption=results.caption("targets"),
            category=results.category("targets"),
        ),
    log:
        f"{A}/logs/tables/targets.log",
    benchmark:
        f"{A}/benchmarks/targets.tsv"
    params:
        namespace=NS,
        targets=CFG["targets"],
        operations=hconfig.targets_plan(CFG),
    script:
        "../scripts/targets.py"
