"""Launching kernels at run time: our CUDA C++ through CuPy/NVRTC (cuda), the description of each
compiled instance a dispatch chooses (instances), the argument checks every launcher shares
(checks), and kernels delivered as PTX or a cubin by another toolchain (external, exprs)."""
