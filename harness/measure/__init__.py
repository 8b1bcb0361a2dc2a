"""The measure stage (workflow/rules/measure.smk): everything that runs on the GPU. Checks against
float64, Nsight Systems captures, event spans, graph-replay cross-checks, Nsight Compute counters
and the session's ceilings, each under the GPU lock of its measurement group."""
