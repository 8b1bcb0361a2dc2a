"""Finding an external tool (nsys, ncu): the config's path, else an environment variable, else
PATH, else known install folders; one sentence naming every place looked at when it is nowhere."""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from harness.errors import ToolMissing


def find_tool(name: str, title: str, configured: str | None, config_key: str, env_var: str,
              install_globs: Sequence[str] = ()) -> str:
    """The executable to use for `name`; ToolMissing names the places looked at."""
    tried: list[str] = []
    for label, candidate in ((f"config {config_key}", configured), (f"${env_var}", os.environ.get(env_var))):
        if candidate:
            tried.append(f"{label}={candidate}")
            if Path(candidate).is_file() and os.access(candidate, os.X_OK):
                return str(Path(candidate).resolve())
    found = shutil.which(name)
    if found:
        return found
    tried.append("PATH")
    for pattern in install_globs:
        installed = sorted(glob.glob(pattern))
        if installed:
            return installed[-1]
        tried.append(pattern)
    raise ToolMissing(f"{title} ({name}) was not found (looked at {', '.join(tried)}); install it, put it on PATH, "
                      f"or set {env_var} or the config key {config_key} to its executable.")
