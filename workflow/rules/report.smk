# Provenance of the namespace and the two rendered reports (field note, issue comment).


rule provenance:
    input:
        records=[
            f"{A}/measure/{op}/{shape}/record.json"
            for op in OPS
            for shape in shapes_of(op)
        ],
    output:
        provenance=f"{A}/provenance.json",
    log:
        f"{A}/logs/provenance.log",
    benchmark:
        f"{A}/benchmarks/provenance.tsv"
    params:
        cfg=hconfig.recorded(CFG),
    script:
        "../scripts/provenance.py"


rule render:
    input:
        **ceilings_input(),
        kernel_time=f"{A}/tables/kernel_time.csv",
        kernel_time_detail=f"{A}/tables/kernel_time_detail.csv",
        span=f"{A}/tables/span.csv",
        check=f"{A}/tables/check.csv",
        sweep=f"{A}/tables/sweep.csv",
        census=f"{A}/tables/census.csv",
        gpu_state=f"{A}/tables/gpu_state.csv",
        controls=f"{A}/tables/controls.csv",
        drift=f"{A}/tables/drift.csv",
        counters=f"{A}/tables/counters.csv",
        cross_check=f"{A}/tables/cross_check.csv",
        variants=f"{A}/tables/variants.csv",
        change=f"{A}/tables/change.csv",
        targets=f"{A}/tables/targets.csv",
        provenance=f"{A}/provenance.json",
        field_note_template="report/templates/field_note.md.j2",
        issue_comment_template="report/templates/issue_comment.md.j2",
        page_template="report/templates/page.html.j2",
    output:
        field_note=report(
            f"report/{NS}/field_note.md",
            caption=results.caption("field_note"),
            category=results.category("field_note"),
        ),
        issue_comment=f"report/{NS}/issue_comment.md",
        html=report(
            f"report/{NS}/index.html",
            caption=results.caption("page"),
            category=results.category("page"),
        ),
        overview=report(
            f"report/{NS}/figures/overview.svg",
            caption=results.caption("overview"),
            category=results.category("overview"),
        ),
        figures=[
            report(
                f"report/{NS}/figures/{op}_sweep.svg",
                caption=results.caption("sweep_figure"),
                category=results.category("sweep_figure"),
                labels={"operation": op},
            )
            for op in OPS
        ],
        summary=report(
            f"{A}/summary.json",
            caption=results.caption("summary"),
            category=results.category("summary"),
        ),
    log:
        f"{A}/logs/render.log",
    benchmark:
        f"{A}/benchmarks/render.tsv"
    params:
        cfg=hconfig.report_params(CFG),
    script:
        "../scripts/render.py"


rule bundle:
    input:
        field_note=f"report/{NS}/field_note.md",
        issue_comment=f"report/{NS}/issue_comment.md",
        records=[
            f"{A}/measure/{op}/{shape}/record.json"
            for op in OPS
            for shape in shapes_of(op)
        ],
    output:
        bundle=f"bundles/{NS}.evidence.tar.gz",
    log:
        f"{A}/logs/bundle.log",
    benchmark:
        f"{A}/benchmarks/bundle.tsv"
    params:
        ns=NS,
    script:
        "../scripts/bundle.py"
