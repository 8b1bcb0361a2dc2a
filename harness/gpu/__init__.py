"""The GPU a job runs on: whether one is there (device), the lock that keeps one measurement at a
time per GPU and a measurement group on one GPU (lock), the NVML watch around a capture (watch),
the deadline that stops a hung job (deadline), and the preflight that stops a run before any job
starts when the GPU or nsys it needs is missing (preflight)."""
