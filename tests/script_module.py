"""A script under scripts/ loaded as a module, for the tests that call its functions directly."""

from __future__ import annotations

import importlib.util
from typing import Any

from harness import ROOT


def load_script(name: str) -> Any:
    """scripts/<name>.py as a fresh module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
