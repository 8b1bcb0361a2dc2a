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


def shown(text: object, limit: int = 160) -> str:
    """Untrusted text (a file name, a member name, a cell) made safe for a one-line message: every
    character that does not print (a control character that could retitle a terminal, a newline)
    written as its escape, and at most `limit` characters."""
    s = "".join(c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
                for c in str(text))
    return s if len(s) <= limit else s[: limit - 1] + "…"
