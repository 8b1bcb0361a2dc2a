"""Namespace names and the rule that retained evidence is read-only: the one place every target and
command asks.

A namespace is a folder name under `artifacts/` and `report/`. `check_name` accepts a plain name
(letters, digits, '.', '_', '-', starting with a letter or digit, no path part) that is not one of
the project's own folders or files (`RESERVED`: `report/templates` and the like would otherwise
receive a run's output).

A namespace is *retained* once its evidence is kept: git tracks a file of it, or its report is
finished (`report/<ns>/field_note.md`), or a sweep of it finished (`tables/sweep_*_provenance.json`).
`refuse_retained` stops a write into one in one sentence that names the way forward: a new
namespace, or the explicit override `overwrite: <the namespace>` in the config (or
`--rewrite-retained` for the commands), which the namespace's provenance then records.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

from harness import ROOT
from harness.errors import ConfigError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
RESERVED = frozenset({
    "templates", "figures", "artifacts", "report", "reports", "bundles", "docs", "harness", "kernels", "tests",
    "workflow", "scripts", "profiles", "shared", "logs", "tables", "measure", "build", "counters", "benchmarks",
    "history.sqlite", "auto",
})
"""Names a namespace may not take: the project's own folders and files, and the ones a namespace's
own folder holds (so `report/templates` or `artifacts/tables` never receive a run's output)."""


def check_name(name: object, what: str = "namespace") -> str:
    """The name, if it is a valid namespace name; ConfigError (one sentence) otherwise."""
    text = str(name) if isinstance(name, str) else None
    if text is None or not NAME.fullmatch(text) or text in (".", "..") or ".." in text:
        raise ConfigError(f"{what} {name!r} is not a namespace name: use letters, digits, '.', '_' and '-', "
                          "starting with a letter or a digit, with no path part.")
    if text.lower() in RESERVED:
        raise ConfigError(f"{what} {text!r} is reserved (a folder or file of the project); pick another name.")
    return text


def namespace_dir(name: object, artifacts: str | Path = ROOT / "artifacts") -> Path:
    """artifacts/<name> for a valid name (check_name), never a path outside `artifacts`."""
    text = check_name(name)
    root = Path(artifacts).resolve()
    path = (root / text).resolve()
    if path.parent != root:
        raise ConfigError(f"namespace {text!r} does not stay inside {root}.")
    return path


def report_dir(name: object, root: str | Path = ROOT) -> Path:
    """report/<name> for a valid name."""
    return Path(root) / "report" / check_name(name)


def reported(root: str | Path = ROOT) -> list[str]:
    """The namespaces whose report is finished under `root` (`report/<ns>/field_note.md`), sorted:
    in a checkout, the retained ones whose reports are committed."""
    return sorted(p.parent.name for p in (Path(root) / "report").glob("*/field_note.md"))


def newest(names: Iterable[str], prefix: str) -> str | None:
    """Of `names`, the one '<prefix><n>' with the highest number n (None where none is so named):
    'h200-ops-' picks the latest full run of that configuration."""
    numbered = [n for n in names if n.startswith(prefix) and n[len(prefix):].isdigit()]
    return max(numbered, key=lambda n: int(n[len(prefix):])) if numbered else None


def _tracked(root: Path, name: str) -> bool | None:
    """Whether git tracks a file of the namespace (None where this is no git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "--", f"artifacts/{name}", f"report/{name}"], cwd=root,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return bool(out.stdout.strip())


def retained(name: str, root: str | Path = ROOT) -> str | None:
    """Why the namespace is retained evidence (a few words), or None where it is not."""
    root = Path(root)
    check_name(name)
    if _tracked(root, name):
        return "git tracks its evidence"
    if (root / "report" / name / "field_note.md").is_file():
        return "its report is finished"
    if any((root / "artifacts" / name / "tables").glob("sweep_*_provenance.json")):
        return "a sweep of it finished"
    return None


def refuse_retained(name: str, root: str | Path = ROOT, overwrite: str | None = None, how: str = "overwrite") -> None:
    """ConfigError (one sentence) where `name` is retained and `overwrite` does not name it."""
    why = retained(name, root)
    if why and overwrite != name:
        override = (f"set 'overwrite: {name}' in the config (recorded in its provenance)" if how == "overwrite"
                    else f"pass {how} (recorded in its provenance)")
        raise ConfigError(f"namespace {name} is retained evidence ({why}) and is read-only: write a new namespace "
                          f"(--config namespace=NEW), or {override}.")


def writes_into(name: str, outputs: Iterable[str | Path], root: str | Path = ROOT) -> bool:
    """Whether any of `outputs` (paths relative to `root`, or absolute) lies in the namespace's
    evidence, artifacts/<name>/ or report/<name>/: the bundle's own output (bundles/<ns>...) does
    not, so a retained namespace can still be bundled, while every job that derives evidence does."""
    root = Path(root).resolve()
    inside = (root / "artifacts" / check_name(name), root / "report" / name)
    for out in outputs:
        path = (root / out).resolve()  # an absolute `out` stays itself under /
        if any(path == folder or folder in path.parents for folder in inside):
            return True
    return False
