"""Baseline revisions: another revision's kernel sources, read from git, to be built and measured
beside this checkout's in the same run (a pull request's kernels against its base commit's).

`resolve` turns what a user wrote (a branch, tag or commit) into a `Revision` with its full commit
and the label its implementations carry (`cuda@main`); a name git does not know is one sentence.
`extract` writes that commit's `kernels/<op>/` and each operation's dispatch
(`harness/ops/<op>/kernels.py`) into a folder from git's objects alone (`git ls-tree` and `git
cat-file`), so neither the work tree nor the index is touched. The kernels there are built and
launched by that dispatch (harness.ops.dispatch), which imports this checkout's launch layer
(harness.launch); inputs, reference and checks are this checkout's, so both revisions are
measured on the same problems. A revision whose dispatch no longer fits this checkout's launch
layer cannot be measured, and says why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import ROOT
from harness.errors import ConfigError, EvidenceError

SEPARATOR = "@"
"""Between an implementation of ours and a revision's label: 'cuda@main'."""

_LABEL_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class CannotMeasure(EvidenceError):
    """Ours at a baseline revision cannot be bound there (its kernel does not compile, or this
    checkout's launcher no longer fits it): one sentence, 'cuda@main cannot be measured at main:
    <reason>'. The check records it as failed with that sentence; the group goes on without it."""


@dataclass(frozen=True)
class Revision:
    given: str
    """What the user wrote ('main', 'v0.3', 'HEAD~1', a commit)."""
    commit: str
    """Its full commit."""
    label: str
    """What its implementations carry after '@': `given` with every run of characters other than
    letters, digits, '.', '_' and '-' made one '-' ('HEAD~1' -> 'HEAD-1')."""


def label(given: str) -> str:
    """The label of a revision as written (Revision.label)."""
    return _LABEL_SAFE.sub("-", given).strip("-") or "revision"


def _git(args: Sequence[str], repo: Path, what: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k == "GIT_DIR"}
    try:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, env=env, timeout=60)
    except FileNotFoundError:
        raise EvidenceError(f"git is not installed, so {what} cannot be read.") from None
    except subprocess.TimeoutExpired:
        raise EvidenceError(f"git took longer than 60 s to read {what}.") from None


def resolve(revisions: str | Sequence[str], repo: Path = ROOT, extracted: Path | None = None) -> list[Revision]:
    """Each revision as a Revision, in the order given; ConfigError (one sentence) for one that is
    not a commit of the repository, and for two that share a label.

    `extracted` is the folder of the namespace's extracted baselines (artifacts/<ns>/baseline/):
    where git cannot answer (a copy of the tree without its history, as on a lent GPU machine) a
    revision whose sources a checkout with the history already extracted there (its COMMIT file)
    is taken from there."""
    given = [revisions] if isinstance(revisions, str) else list(revisions)
    out: list[Revision] = []
    for rev in given:
        if not isinstance(rev, str) or not rev.strip() or rev.startswith("-"):
            raise ConfigError(f"config: baseline {rev!r} is not a git revision (a branch, tag or commit).")
        proc = _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], repo, f"the baseline {rev!r}")
        commit = proc.stdout.decode().strip()
        if proc.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}", commit):
            kept = _extracted_commit(extracted, label(rev))
            if kept is None:
                raise ConfigError(f"config: baseline {rev!r} is no commit of the repository at {repo} "
                                  f"(git rev-parse found none).")
            commit = kept
        out.append(Revision(given=rev, commit=commit, label=label(rev)))
    labels = [r.label for r in out]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ConfigError(f"config: the baselines {', '.join(r.given for r in out if r.label in twice)} share the "
                          f"label {twice[0]!r}; name each revision once.")
    return out


def _extracted_commit(extracted: Path | None, name: str) -> str | None:
    """The commit whose sources `extract` left under `extracted`/<name>/, or None."""
    if extracted is None:
        return None
    try:
        commit = (extracted / name / "COMMIT").read_text().strip()
    except OSError:
        return None
    return commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None


def _is_source(name: str) -> bool:
    """Whether kernels/<op>/<rest> is something a build or a launch reads: not the notebook or
    other Markdown, and nothing under a data/ folder (measured tables kept beside the kernels)."""
    parts = name.split("/")
    return not name.endswith(".md") and "data" not in parts[2:-1]


def extract(commit: str, dest: Path, ops: Sequence[str], repo: Path = ROOT) -> Path:
    """`commit`'s kernel sources under kernels/<op>/ of each of `ops` (every file but Markdown and
    data/ folders) under `dest`/kernels/, and its dispatch harness/ops/<op>/kernels.py where it
    has one, from git's objects (module docstring), with the commit in `dest`/COMMIT and its
    committer date (ISO 8601) in `dest`/DATE; returns `dest`. Written into a partial folder and
    renamed whole; an existing `dest` is replaced. EvidenceError (one sentence) where git cannot
    read them, or the commit has no kernels/<op>/ for one of `ops`."""
    paths = [f"kernels/{op}" for op in ops]
    dispatches = [f"harness/ops/{op}/kernels.py" for op in ops]
    proc = _git(["ls-tree", "-r", "-z", "--full-tree", commit, "--", *paths, *dispatches], repo,
                f"the kernels of {commit[:12]}")
    if proc.returncode != 0:
        why = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no reason given"])[0]
        raise EvidenceError(f"git cannot list the kernels of {commit[:12]}: {why}.")
    entries = []
    for record in filter(None, proc.stdout.split(b"\0")):
        meta, _, raw_name = record.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        entries.append((mode, kind, sha, raw_name.decode()))
    missing = [op for op, path in zip(ops, paths) if not any(e[3].startswith(path + "/") for e in entries)]
    if missing:
        raise EvidenceError(f"commit {commit[:12]} has no kernels/{missing[0]}/, so its {missing[0]} kernels cannot be "
                            f"built there.")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        for mode, kind, sha, name in entries:
            if kind != "blob" or mode == "120000" or not _is_source(name):  # a submodule, a link, notes
                continue
            blob = _git(["cat-file", "blob", sha], repo, f"{name} at {commit[:12]}")
            if blob.returncode != 0:
                raise EvidenceError(f"git cannot read {name} at {commit[:12]}.")
            target = partial / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(blob.stdout)
        (partial / "COMMIT").write_text(commit + "\n")
        shown = _git(["show", "-s", "--format=%cI", commit], repo, f"the date of {commit[:12]}")
        (partial / "DATE").write_text((shown.stdout.decode().strip() if shown.returncode == 0 else "") + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(partial, dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return dest


def split(impl: str) -> tuple[str, str | None]:
    """('cuda', 'main') for 'cuda@main'; ('cuda', None) for 'cuda'."""
    base, sep, name = impl.partition(SEPARATOR)
    return base, (name if sep else None)
