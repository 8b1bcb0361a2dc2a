# The build stage: every kernel of ours built offline and censused (no GPU needed).


rule build:
    output:
        census=f"{A}/build/{{op}}/census.json",
    log:
        f"{A}/logs/build/{{op}}.log",
    benchmark:
        f"{A}/benchmarks/build/{{op}}.tsv"
    params:
        sources=sources_of,
        impls=lambda wc: built_impls_of(wc.op),
        shapes=lambda wc: shapes_of(wc.op),
        arch=CFG["arch"],
        block=lambda wc: hconfig.build_block(CFG, wc.op),
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
