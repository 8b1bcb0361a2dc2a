# Build every kernel of ours offline (no GPU needed) and write its census.


rule build:
    output:
        census=f"{A}/build/{{op}}/{{impl}}/census.json",
    log:
        f"{A}/logs/build/{{op}}/{{impl}}.log",
    params:
        shapes=lambda wc: shapes_of(wc.op),
        arch=CFG["arch"],
    wildcard_constraints:
        impl="|".join(BUILT_IMPLS) or "none",
    script:
        "../scripts/build.py"
