"""Where our kernel sources are read from: `kernels/` of this checkout, or, inside `at(root)`, the
`kernels/` folder under `root` (the sources of another revision, harness.baseline), so that the
build compiles and the launchers launch the kernels as they were there.

Everything that reads a kernel source goes through here: the CUDA sources CuPy and the census
compile (`kernels_dir`), and the Triton modules, kernels and heuristics alike (`module`): inside
`at(root)` a module is loaded from its file under `root` under a name of its own, so the two
revisions' kernels live side by side in one process, and Triton's JIT and cache see each one's
own source. The same loader serves a revision's dispatch (`harness/ops/<op>/kernels.py` under
`root`, chosen by harness.ops.dispatch). `tag()` names the sources in force, for caches keyed by them.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from harness import ROOT
from harness.errors import EvidenceError

_ROOT: Path | None = None
"""The tree whose kernels/ is in force, or None for this checkout's."""


@contextlib.contextmanager
def at(root: str | Path | None) -> Iterator[None]:
    """Within this block, kernel sources come from `root`/kernels/ (None: this checkout's)."""
    global _ROOT
    saved = _ROOT
    _ROOT = None if root is None or Path(root).resolve() == ROOT.resolve() else Path(root).resolve()
    try:
        yield
    finally:
        _ROOT = saved


def tree() -> Path | None:
    """The tree whose sources are in force, or None for this checkout's."""
    return _ROOT


def kernels_dir() -> Path:
    """The kernels/ folder in force."""
    return (_ROOT or ROOT) / "kernels"


def tag() -> str:
    """'' for this checkout's sources, else a short name of the tree in force."""
    return "" if _ROOT is None else hashlib.sha256(str(_ROOT).encode()).hexdigest()[:12]


LOADABLE = ("kernels.", "harness.ops.")
"""What `module` loads from a tree: kernel modules, and an operation's dispatch (its kernels.py)."""


def module(name: str) -> ModuleType:
    """The Python module `name` under kernels/ ('kernels.layernorm.layernorm_triton') or an
    operation's dispatch ('harness.ops.layernorm.kernels') of the sources in force: imported as
    usual for this checkout's, else loaded from its file under the tree in force as
    `_sources_<tag>.<name>` (its own imports are this checkout's modules). EvidenceError (one
    sentence) where that tree lacks it or it does not load."""
    if not name.startswith(LOADABLE):
        raise EvidenceError(f"{name!r} is not a module under kernels/ nor an operation's dispatch.")
    if _ROOT is None:
        return importlib.import_module(name)
    key = f"_sources_{tag()}.{name}"
    loaded = sys.modules.get(key)
    if loaded is not None:
        return loaded
    path = _ROOT / Path(*name.split(".")).with_suffix(".py")
    if not path.is_file():
        raise EvidenceError(f"the sources under {_ROOT} have no {path.relative_to(_ROOT)}.")
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None:
        raise EvidenceError(f"{path} cannot be loaded as a Python module.")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[key] = loaded
    try:
        spec.loader.exec_module(loaded)
    except Exception as exc:
        del sys.modules[key]
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise EvidenceError(f"{path} does not load: {type(exc).__name__}: {first}.") from None
    return loaded
