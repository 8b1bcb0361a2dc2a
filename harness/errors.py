"""Errors that end a job with one sentence instead of a traceback."""


class EvidenceError(Exception):
    """A failure the user can act on; its message is one complete sentence."""


class ConfigError(EvidenceError):
    """The configuration is invalid."""


class CheckFailed(EvidenceError):
    """An implementation's output disagreed with the float64 reference."""


class ToolMissing(EvidenceError):
    """A required external tool (GPU, nsys, compiler) is not available."""


class GPUFault(EvidenceError):
    """A kernel crashed on the GPU (illegal address, launch failure): the process's CUDA context is
    dead, so the job ends at once after its sentence, without the interpreter's teardown (which
    would only add the libraries' own errors about unloading modules from that context)."""
