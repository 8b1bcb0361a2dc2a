"""Which implementations run the same code at a shape, from the census (tables/census.csv: one
row per compiled kernel, with the shapes it serves and the SHA-256 of its SASS, every instruction
with its encoding). A variant whose defines leave every kernel serving a shape as it was compiles
to its base's code there (layer norm's block variants at width 768 run the base's kernel;
matmul's staged128 at 1024³ too): measured under its own name, it is an A/A pair at that shape,
and its verdict says nothing of the variant. Likewise ours at a baseline revision where the change
left a kernel's code as it was (a comment, a kernel of another operation).

A census from before the column (or a row without a hash) answers None: unknown, never "same"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.io import row_dicts

Serving = Mapping[tuple[str, str, str], frozenset[str] | None]
"""(op, impl, shape) -> the SASS hashes of the kernels serving that shape, None where one of them
has none."""


def _hash(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) == 64 else None


def serving(census: Any) -> dict[tuple[str, str, str], frozenset[str] | None]:
    """`Serving` of a census table (a frame, or None for no census)."""
    found: dict[tuple[str, str, str], set[str] | None] = {}
    for r in row_dicts(census) if census is not None else []:
        digest = _hash(r.get("sass_sha256"))
        for shape in str(r.get("shapes") or "").split(";"):
            if not shape:
                continue
            key = (str(r.get("op")), str(r.get("impl")), shape)
            held = found.setdefault(key, set())
            if held is None or digest is None:
                found[key] = None
            else:
                held.add(digest)
    return {k: frozenset(v) if v is not None else None for k, v in found.items()}


def same(code: Serving, op: str, shape: str, a: str, b: str) -> bool | None:
    """Whether implementations `a` and `b` run the same code at (op, shape); None where the
    census does not say (no row for one of them there, or a row without a hash)."""
    mine, theirs = code.get((op, a, shape)), code.get((op, b, shape))
    if not mine or not theirs:
        return None
    return mine == theirs


def identical_variants(code: Serving, variants: Any) -> set[tuple[str, str, str]]:
    """(op, shape, variant) of every row of a variants table (harness.tables.derive.VARIANT_COLUMNS)
    whose variant runs its base's code at that shape."""
    return {(str(r.get("op")), str(r.get("shape")), str(r.get("variant")))
            for r in (row_dicts(variants) if variants is not None else [])
            if same(code, str(r.get("op")), str(r.get("shape")), str(r.get("variant")), str(r.get("base")))}
