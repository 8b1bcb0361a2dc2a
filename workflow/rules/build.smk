# The build stage: every kernel of ours built offline and censused (no GPU needed), with the kernels
# of each baseline revision read from git first.


rule baseline_sources:
    output:
        commit=f"{A}/baseline/{{label}}/COMMIT",
    log:
        f"{A}/logs/baseline/{{label}}.log",
    params:
        commit=lambda wc: BASELINES[wc.label].commit,
        ops=BUILT_OPS,
    script:
        "../scripts/baseline_sources.py"


# Builds come first (priority): a measurement group then loads the cubins the build left
# (harness/launch/modules.py) instead of compiling every kernel a second time through CuPy.
rule build:
    input:
        baselines=baseline_sources(),
    output:
        census=f"{A}/build/{{op}}/census.json",
    log:
        f"{A}/logs/build/{{op}}.log",
    benchmark:
        f"{A}/benchmarks/build/{{op}}.tsv"
    priority: 1
    params:
        sources=sources_of,
        impls=lambda wc: built_impls_of(wc.op),
        shapes=lambda wc: shapes_of(wc.op),
        arch=CFG["arch"],
        block=lambda wc: hconfig.build_block(CFG, wc.op),
        baselines=hconfig.baseline_roots(CFG),
    script:
        "../scripts/build.py"


rule census_table:
    input:
        census=[f"{A}/build/{op}/census.json" for op in BUILT_OPS],
    output:
        table=f"{A}/tables/census.csv",
    log:
        f"{A}/logs/tables/census.log",
    benchmark:
        f"{A}/benchmarks/census_table.tsv"
    params:
        namespace=NS,
    script:
        "../scripts/census_table.py"
