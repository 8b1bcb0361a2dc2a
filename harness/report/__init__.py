"""The report stage (workflow/rules/report.smk): a namespace's provenance, and the field note, issue
comment and figures rendered from its tables."""
