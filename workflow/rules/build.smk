# Build every kernel of ours offline (no GPU needed) and write its census.


rule build:
    output:
        census=f"{A}/build/{{op}}/{{impl}}/census.json",
    log:
        f"{A}/logs/build/{{op}}/{{impl}}.log",
    params:
        shapes=lambda wc: shapes_of(wc.op),
        arch=CFG["arch"],
        external=lambda wc: CFG["operations"][wc.op].get("external"),
    wildcard_constraints:
        impl="cuda|triton|external",
    script:
        "../scripts/build.py"
