"""Shapes as the configuration writes them: dimensions joined by 'x', with an optional tag after
'-' that names a variation of the inputs ('65536x1048576x64-powerlaw')."""

from __future__ import annotations

from harness.errors import ConfigError

__all__ = ["parse_shape", "shape_dims", "shape_tag"]


def parse_shape(shape: str) -> tuple[int, ...]:
    """'4096x768' -> (4096, 768); a tag after '-' is not a dimension ('64x8x2-powerlaw' -> (64, 8, 2))."""
    try:
        dims = tuple(int(d) for d in shape.split("-", 1)[0].split("x"))
    except ValueError:
        raise ConfigError(f"config: shape {shape!r} is not of the form AxB.") from None
    if not dims or any(d <= 0 for d in dims):
        raise ConfigError(f"config: shape {shape!r} has a dimension that is not positive.")
    return dims


def shape_dims(shape: str) -> tuple[int, ...]:
    """The dimensions of a shape that may be empty ('0x768' -> (0, 768)): what an operation makes
    its inputs, output, bytes and flops from. A config's shapes go through `parse_shape`, which
    refuses a zero; the generic GPU test's edge shapes (an operation's TEST_SHAPES) may hold one."""
    head = shape.split("-", 1)[0]
    parts = head.split("x")
    if head and all(part.isdigit() for part in parts):
        return tuple(int(part) for part in parts)
    return parse_shape(shape)  # its one sentence


def shape_tag(shape: str) -> str | None:
    """The tag after '-' in a shape ('65536x1048576x64-powerlaw' -> 'powerlaw'), or None."""
    return shape.split("-", 1)[1] if "-" in shape else None
