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
        op_cfg=lambda wc: CFG["operations"][wc.op],
    wildcard_constraints:
        impl="|".join(["cuda", "triton", "external"] + [re.escape(i) for i in ALL_IMPLS if "." in i]),
    script:
        "../scripts/build.py"
