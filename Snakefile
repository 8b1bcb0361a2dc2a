# Kernel evidence pipeline. Main job: `snakemake --cores 1 report` (the default target).
# Targets (all documented in README.md):
#   report                      build, census, check, capture, tables and the rendered reports
#   sweep_<op>                  one operation's shape sweep, e.g. sweep_layernorm
#   artifacts/<ns>/tables/shape/<op>/<shape>.csv   one shape, e.g. .../layernorm/4096x768.csv
#   census                      build every kernel and write the census (no GPU needed)
#   bundle                      one archive of the namespace for a pull request (bundles/<ns>.evidence.tar.gz)
from snakemake.utils import min_version

min_version("9.20")


configfile: "config.yaml"


include: "workflow/rules/common.smk"


report: results.WORKFLOW_CAPTION


rule report:
    default_target: True
    input:
        field_note=f"report/{NS}/field_note.md",
        issue_comment=f"report/{NS}/issue_comment.md",
        html=f"report/{NS}/index.html",
        summary=f"{A}/summary.json",


rule census:
    input:
        census=f"{A}/tables/census.csv",


include: "workflow/rules/build.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/report.smk"
