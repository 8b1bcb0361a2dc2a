"""The tables stage (workflow/rules/tables.smk): the nsys SQLite reader, the kernel-time, sweep,
variant, cross-check and counters tables derived from the measurements, and the trust tables
(controls against their bands, drift) read across retained namespaces."""
