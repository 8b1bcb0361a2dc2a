"""Every command in README.md and docs/*.md, run.

The convention (README.md, "Commands in these pages"): a command a reader types is a line of a
fenced block tagged `sh`, one command per line (`#` starts a comment, a trailing `\\` continues a
line, a here-document runs to its terminator); no other shell tag (`bash`, `console`, ...) and no
`$ ` prompts. Placeholders are `<ns>`, `<earlier>`, `<later>`, `<op>`, `<shape>` and `<commit>`.
The project's own commands (snakemake, `python -m harness`, its scripts, pytest, pip) appear in
prose only as names, or as the beginning of a command some block holds.

Each command is run in one copy of the repository (tests/repo_copy.py) that also holds a namespace
measured by the CPU run of the main command with the stand-in device (the `pipeline` fixture, for
`<ns>`) and two committed namespaces (for `<earlier>` and `<later>`):

* `snakemake ...` runs as a dry run (`-n` appended; `--unlock` runs as it is): every target that
  measures needs a GPU, and a dry run checks that the command line, the target and the config are
  what the workflow accepts;
* `python -m harness ...` runs for real, and must exit 0;
* a here-document that writes a file (`cat > FILE <<'EOF'`) runs, so later commands find the file;
* everything else must match an entry of SKIP, each with its reason.

The test fails when a documented command fails, or when a command is neither run nor skipped.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import repo_copy

from harness import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

STANDIN_NS = repo_copy.PIPELINE_NS
"""`<ns>`: the namespace the stand-in CPU run of the main command writes (tests/repo_copy.py)."""
EARLIER, LATER = "h200-ops-2", "h200-ops-3"
"""`<earlier>`, `<later>`: two committed namespaces (compare reads their kernel times and rounds)."""
PLACEHOLDERS = {"ns": STANDIN_NS, "earlier": EARLIER, "later": LATER, "op": "layernorm", "shape": "4096x768"}
"""What each placeholder becomes where a command runs. `<commit>` appears only in skipped commands."""
DOCUMENTED_PLACEHOLDERS = {*PLACEHOLDERS, "commit"}

# Commands the test does not run, each with the reason. An entry that matches no documented command
# fails test_every_skip_entry_is_used, so the list never outlives the docs.
SKIP: list[tuple[str, str]] = [
    # Installs: they change the environment the tests run in; CI runs the set-up command itself (.ci/run).
    (r"^python3 -m pip install ", "installs packages (CI's .ci/run runs this set-up command itself)"),
    (r"^(DEBIAN_FRONTEND=\S+ )?apt-get ", "installs system packages as root (CI's .ci/run does, before the SLURM tests)"),
    # The test suite itself.
    (r"^python3 -m pytest -q$", "the whole suite, which this test is part of; CI runs exactly this command"),
    (r"^python3 -m pytest -q -m slurm ", "needs the local SLURM cluster up; CI runs it after scripts/slurm-local.sh up"),
    # docs/adding-an-operation.md's `scale` exists only once its files are written.
    (r"^python3 -m pytest -q tests/test_ops_gpu\.py -k scale$",
     "needs a GPU and the page's scale operation (tests/test_adding_an_operation.py writes it into a copy)"),
    (r"'run_operations=\[scale\]'",
     "needs the page's scale operation; tests/test_adding_an_operation.py writes it into a copy, dry-runs report "
     "and builds its census"),
    # A live SLURM cluster of one node (docs/slurm-local.md), root only.
    (r"^scripts/slurm-local\.sh ", "starts and stops SLURM daemons as root (CI: .ci/run, tests/test_slurm_local.py)"),
    (r"^sacct ", "reads the accounting of a running SLURM cluster"),
    (r"^python3 -c \"import pandas", "compares the census tables of two real runs through SLURM"),
    (r"^work=\$\(mktemp -d\)$", "makes a copy of the repository; this test runs everything in its own copy"),
    (r"^git ls-files ", "makes a copy of the repository; this test runs everything in its own copy"),
    (r'^cd "\$work"$', "enters that copy; this test runs everything in its own copy"),
    # Kubernetes: its executor plugin and an S3 bucket (every input and output goes through it).
    (r"^snakemake --profile profiles/kubernetes ",
     "needs snakemake-executor-plugin-kubernetes and the S3 storage plugin with credentials, which CI does not install"),
    (r"--config baseline=main( namespace=<ns>)?$",
     "needs the repository's git history, which this test's copy lacks (tests/test_baseline_pipeline.py runs a "
     "baseline in a copy made a git repository of its own)"),
    # Snakemake's report reads the metadata a run leaves in .snakemake/, which this test's copy has not.
    (r"^snakemake --report report\.(html|zip)$",
     "needs a finished run's .snakemake/ metadata; tests/test_snakemake_report.py runs both after the stand-in run"),
    # The GPU machine only.
    (r"^python3 scripts/gpu_tests\.py (smoke|full)$",
     "runs a GPU test tier, which needs a GPU (tests/test_gpu_tests_script.py runs the script on the CPU)"),
    (r"^source gpu-env\.sh && ", "runs on the lent GPU machine (docs/gpu-machine.md), with its carried wheels"),
    (r"^python3 scripts/gpu_load\.py ", "puts load on a GPU"),
    (r"^python3 scripts/placement_spread\.py ",
     "reads committed namespaces this copy does not hold; tests/test_placements.py runs it as documented"),
    (r"^python -m harness between-runs h200-resolution-",
     "reads committed namespaces this copy does not hold; tests/test_between_runs.py checks the config against "
     "the same estimate over the same runs"),
    (r"^python3 scripts/slot_effects\.py ",
     "reads committed namespaces this copy does not hold; tests/test_slot_effects.py runs the script"),
    (r"^python3 scripts/power_cap_effect\.py ",
     "reads every committed namespace of a GPU model; tests/test_power_cap_effect.py runs the script on made-up ones"),
    (r"^python3 scripts/trim_wheels\.py \.whl$",
     "trims the device wheelhouse, which this copy does not hold; tests/test_trim_wheels.py runs it on a made-up one"),
    (r"^python3 scripts/compact_set_aside\.py$",
     "rewrites committed namespaces' controls tables, which this copy does not hold; tests/test_set_aside.py runs "
     "it on a made-up one"),
    (r"^python3 scripts/compress_tables\.py$",
     "compresses committed namespaces' tables, which this copy does not hold; tests/test_table_files.py runs it on "
     "made-up ones"),
]


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


FENCE = re.compile(r"^\s*```(\S*)")
HEREDOC = re.compile(r"<<-?\s*'?\"?([A-Za-z_][A-Za-z0-9_]*)'?\"?")
PLACEHOLDER = re.compile(r"<([a-z][a-z0-9-]*)>")
SHELL_TAGS = {"bash", "shell", "console", "zsh", "shell-session", "sh-session"}


def fenced_blocks(path: Path) -> list[tuple[str, int, list[str]]]:
    """(tag, line number of the first line inside, lines) of every fenced block."""
    out, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        tag, start, body = m.group(1), i + 2, []
        i += 1
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i])
            i += 1
        out.append((tag, start, body))
        i += 1
    return out


def strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a `#` outside quotes, after a space or at the start)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands_of(path: Path) -> list[Command]:
    doc = str(path.relative_to(ROOT))
    out = []
    for tag, start, body in fenced_blocks(path):
        if tag != "sh":
            continue
        i = 0
        while i < len(body):
            line, number = body[i].strip(), start + i
            i += 1
            if not line or line.startswith("#"):
                continue
            text = strip_comment(line)
            while text.endswith("\\") and i < len(body):
                text = text[:-1].rstrip() + " " + strip_comment(body[i].strip())
                i += 1
            heredoc = HEREDOC.search(text)
            if heredoc:
                rest = []
                while i < len(body) and body[i].strip() != heredoc.group(1):
                    rest.append(body[i])
                    i += 1
                text = "\n".join([text, *rest, heredoc.group(1)])
                i += 1
            out.append(Command(doc, number, text))
    return out


COMMANDS = [c for path in DOCS for c in commands_of(path)]


def skip_reason(text: str) -> str | None:
    for pattern, reason in SKIP:
        if re.search(pattern, text):
            return reason
    return None


def plan(command: Command) -> tuple[str, str]:
    """(how, what): ('skip', reason), ('dry-run', command line), ('run', command line), or
    ('unknown', why) for a command the test neither runs nor skips."""
    reason = skip_reason(command.text)
    if reason:
        return "skip", reason
    text = command.text
    words = text.split()
    if words[0] == "snakemake":
        if "--unlock" in words or "-n" in words or "--dry-run" in words:
            return "run", text
        return "dry-run", text + " -n"
    if text.startswith(("python -m harness ", "python -m harness.")):
        return "run", text
    if re.match(r"^cat > \S+ <<", text):
        return "run", text
    return "unknown", "neither run by this test nor in its skip list"


def substitute(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in PLACEHOLDERS:
            raise AssertionError(f"unknown placeholder <{m.group(1)}> in {text!r}")
        return PLACEHOLDERS[m.group(1)]

    return PLACEHOLDER.sub(one, text)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, pipeline) -> tuple[Path, dict[str, str]]:  # type: ignore[no-untyped-def]
    """A copy of the repository holding the stand-in run's namespace and two committed ones, and
    the environment the commands run in: the copy's `harness`, and `python`, `python3` and
    `snakemake` meaning this interpreter."""
    standin, _, proc = pipeline
    assert proc.returncode == 0, proc.stderr[-3000:]
    base = tmp_path_factory.mktemp("docs")
    copy = repo_copy.copy_repo(base / "repo")
    for ns, source in ((STANDIN_NS, standin), (EARLIER, ROOT), (LATER, ROOT)):
        for top in ("artifacts", "report"):
            shutil.copytree(source / top / ns, copy / top / ns)
    bin_dir = base / "bin"
    bin_dir.mkdir()
    for name, args in (("python", ""), ("python3", ""), ("snakemake", " -m snakemake")):
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)}{args} \"$@\"\n")
        shim.chmod(0o755)
    env = repo_copy.env(copy, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                        EVIDENCE_LOCK_DIR=str(base / "locks"))
    return copy, env


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_documented_command(command: Command, work: tuple[Path, dict[str, str]]) -> None:
    how, what = plan(command)
    if how == "skip":
        pytest.skip(f"{command.where}: {what}")
    assert how != "unknown", f"{command.where}: {command.text!r} is {what}"
    line = substitute(what)
    copy, env = work
    proc = subprocess.run(["bash", "-c", line], cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (f"{command.where}: `{line}` ({how}) exited {proc.returncode}:\n"
                                  f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def test_every_command_is_run_or_skipped() -> None:
    assert COMMANDS, "no command found in the docs"
    unknown = [f"{c.where}: {c.text}" for c in COMMANDS if plan(c)[0] == "unknown"]
    assert unknown == [], "commands neither run nor in SKIP:\n" + "\n".join(unknown)


def test_every_skip_entry_is_used() -> None:
    unused = [pattern for pattern, _ in SKIP if not any(re.search(pattern, c.text) for c in COMMANDS)]
    assert unused == [], f"SKIP entries that match no documented command: {unused}"


def test_placeholders_are_the_documented_ones() -> None:
    found = {(m.group(1), c.where) for c in COMMANDS for m in PLACEHOLDER.finditer(c.text)}
    assert {name for name, _ in found} <= DOCUMENTED_PLACEHOLDERS, sorted(found)


def test_one_convention_for_commands() -> None:
    """Commands are in ```sh blocks, without prompts."""
    wrong = []
    for path in DOCS:
        for tag, start, body in fenced_blocks(path):
            if tag in SHELL_TAGS:
                wrong.append(f"{path.name}:{start - 1}: a ```{tag} block (use ```sh)")
            if tag == "sh":
                wrong += [f"{path.name}:{start + i}: a '$ ' prompt" for i, line in enumerate(body)
                          if line.lstrip().startswith("$ ")]
    assert wrong == []


INLINE = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")
PROJECT_COMMANDS = ("snakemake ", "python -m harness", "python3 -m harness", "python3 scripts/", "python scripts/",
                    "bash scripts/", "scripts/", "python3 -m pytest", "python -m pytest", "python3 -m pip", "pip install")


def prose(path: Path) -> str:
    """The page without its fenced blocks."""
    out, inside = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            out.append(line)
    return "\n".join(out)


def test_project_commands_in_prose_are_in_blocks() -> None:
    """A project command in prose with arguments must be the beginning of a block's command, so
    every command the reader is told to type is one the test runs or skips."""
    blocks = [" ".join(c.text.split()) for c in COMMANDS]
    loose = []
    for path in DOCS:
        for m in INLINE.finditer(prose(path)):
            span = " ".join(m.group(1).split())
            if not span.startswith(PROJECT_COMMANDS) or " " not in span:
                continue
            if span.startswith("scripts/") and " " not in span.split("/", 1)[1]:
                continue
            if not any(b == span or b.startswith(span + " ") for b in blocks):
                loose.append(f"{path.name}: `{span}`")
    assert loose == [], "commands in prose that no ```sh block holds:\n" + "\n".join(loose)


LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", prose(path), re.MULTILINE)}


def test_links_resolve() -> None:
    broken = []
    for path in DOCS:
        for m in LINK.finditer(prose(path)):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{path.name}: {target} (no such heading)")
    assert broken == []


def test_the_readme_is_short_and_links_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    linked = {m.group(1) for m in LINK.finditer(readme)}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"docs/{p.name}" not in linked]
    assert missing == [], f"docs pages the README does not link: {missing}"
