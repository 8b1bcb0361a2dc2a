"""The main command, end to end on the CPU: `snakemake --cores 1 report` in a copy of the
repository with the stand-in device (tests/repo_copy.py, tests/fake_device.py), one operation at
two shapes with one variant. What it must leave, that a finished run reruns nothing, which change
of the config or the code reruns which jobs (Snakemake's rerun triggers over the rules' params and
inputs), that a value of the environment never reaches what is kept, and that an interrupted run
finishes where it stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fake_device
import pandas as pd
import pytest
import repo_copy
import yaml

from harness import runlog
from harness.__main__ import main as cli
from harness.report import summary

NS, SECRET = repo_copy.PIPELINE_NS, repo_copy.SECRET
snakemake = repo_copy.snakemake


@pytest.fixture
def run(pipeline):  # type: ignore[no-untyped-def]
    return pipeline


def test_the_main_command_leaves_the_reports_tables_and_summary(run) -> None:  # type: ignore[no-untyped-def]
    copy, _, proc = run
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = repo_copy.job_counts(proc.stdout + proc.stderr)
    assert counts["measure"] == 1 and counts["build"] == 1 and counts["render"] == 1  # one session, both groups
    rep, art = copy / "report" / NS, copy / "artifacts" / NS
    for name in ("field_note.md", "issue_comment.md", "index.html", "figures/overview.svg", "figures/layernorm_sweep.svg"):
        assert (rep / name).is_file(), name
    s = summary.read(art / "summary.json")
    assert {(r["op"], r["shape"], r["impl"]) for r in s["rows"]} >= {("layernorm", "8192x768", "cuda.block512")}
    note = (rep / "field_note.md").read_text()
    assert "cuda.block512" in note and "bootstrap interval over interleaved rounds" in note
    assert "cuda.wrong" in note  # its failed check is in the report, and it was not timed
    assert "cuda.wrong" not in {r["impl"] for r in s["rows"] if r.get("kernel_time_us") is not None}
    assert (art / "tables" / "rounds.csv.gz").is_file() and not (art / "tables" / "rounds.csv").exists()
    assert set(pd.read_csv(art / "tables" / "rounds.csv.gz")["impl"]) >= {"cuda", "triton", "cuda.block512"}
    (command,) = runlog.commands(art / "commands.jsonl")
    assert command["command"] == "snakemake --cores 1 report" and command["status"] == "success"
    assert command["jobs"] == sum(counts.values()) and command["seconds"] >= 0
    assert [p.name for p in (art / "benchmarks" / "measure").rglob("*.tsv")] == ["session.tsv"]
    assert len(list((art / "measure" / "layernorm").glob("*/record.json"))) == 2
    # the config's targets judged at layer norm's shapes (the others' operations are not configured here)
    judged = pd.read_csv(art / "tables" / "targets.csv")
    assert set(judged["op"]) == {"layernorm"} and set(judged["shape"]) == {"4096x768", "8192x768"}
    assert [r["status"] for r in s["targets"]] == list(judged["status"])
    assert "## Targets" in note and judged["target"].iloc[0] in note


def test_a_finished_run_reruns_nothing(run) -> None:  # type: ignore[no-untyped-def]
    copy, env, _ = run
    proc = snakemake(copy, env, "-n", "report")
    assert proc.returncode == 0, proc.stderr
    assert repo_copy.job_counts(proc.stdout) == {}, proc.stdout[-2000:]


CHANGES = [
    # (what changes, config override or None, file edit or None, the rules that rerun)
    ("capture.rounds", {"capture": {"rounds": 20}}, None,
     {"measure", "tables", "provenance", "trust", "targets", "render"}),
    ("the layernorm tolerance", {"operations": {"layernorm": {"tolerance": {"atol": 2.0e-4}}}}, None,
     {"measure", "tables", "provenance", "trust", "targets", "render"}),
    ("verdict.margin", {"verdict": {"margin": 0.02}}, None, {"tables", "provenance", "trust", "targets", "render"}),
    ("trust.margin", {"trust": {"margin": 0.1}}, None, {"provenance", "trust", "targets", "render"}),
    ("a target", {"targets": [{"name": "ours at most Triton's", "ops": ["layernorm"], "ratio": "cuda/triton",
                               "at_most": 1.0}]}, None, {"provenance", "trust", "targets", "render"}),
    ("a new shape", {"operations": {"layernorm": {"sweep": ["4096x768", "8192x768", "1024x2048"]}}}, None,
     {"build", "census_table", "ceilings", "measure", "tables", "provenance", "trust", "targets", "render"}),
    ("a planted slowdown", {"operations": {"layernorm": {"variants": {"block512": {"grow": 0.02}}}}}, None,
     {"measure", "tables", "provenance", "trust", "targets", "render"}),
    ("span.exclusive", {"span": {"exclusive": False}}, None, set()),
    ("timeouts.measure_s", {"timeouts": {"measure_s": 100}}, None, set()),
    ("gpu_lock_timeout_s", {"gpu_lock_timeout_s": 50}, None, set()),
    ("the field note template", None, "report/templates/field_note.md.j2", {"render"}),
    ("the layernorm kernel", None, "kernels/layernorm/layernorm.cu", {"build", "census_table", "measure", "tables",
                                                                       "provenance", "trust", "targets", "render"}),
]


@pytest.mark.parametrize(("what", "override", "edit", "rerun"), CHANGES, ids=[c[0] for c in CHANGES])
def test_what_a_change_reruns(run, tmp_path: Path, what: str, override: dict | None, edit: str | None,  # type: ignore[no-untyped-def]
                              rerun: set[str]) -> None:
    copy, env, _ = run
    args = ["-n", "report"]
    saved = None
    if override is not None:
        extra = tmp_path / "change.yaml"
        extra.write_text(yaml.safe_dump(override))
        args += ["--configfile", "config.yaml", str(extra)]
    if edit is not None:
        saved = (copy / edit).read_text()
        (copy / edit).write_text(saved + "\n")
    try:
        proc = snakemake(copy, env, *args)
    finally:
        if saved is not None:
            (copy / edit).write_text(saved)  # type: ignore[operator]
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = repo_copy.job_counts(proc.stdout)
    assert set(counts) - {"report"} == rerun, (what, proc.stdout[-3000:])
    if what == "a new shape":
        assert counts["measure"] == 1  # the session again, with the new group in it


def test_no_value_of_the_environment_is_kept(run) -> None:  # type: ignore[no-untyped-def]
    """GITHUB_TOKEN is set where Snakemake runs. nsys (and the process it captures) starts without
    it; and where its value reaches the raw report anyway (the stand-in writes it there, as a
    process that read it from a file would), the measure step deletes that report and says so. No
    kept file holds the value."""
    copy, _, proc = run
    assert proc.returncode == 0
    seen = json.loads((copy.parent / "bin" / "seen-env.json").read_text())
    assert "GITHUB_TOKEN" not in seen and "PATH" in seen
    kept = [p for p in (copy / "artifacts" / NS).rglob("*") if p.is_file()] + \
           [p for p in (copy / "report" / NS).rglob("*") if p.is_file()]
    assert kept
    holding = [str(p.relative_to(copy)) for p in kept if SECRET.encode() in p.read_bytes()]
    assert holding == []
    records = list((copy / "artifacts" / NS / "measure").rglob("record.json"))
    notes = [n for r in records for n in json.loads(r.read_text())["environment_removed"]]
    assert any("GITHUB_TOKEN" in n for n in notes), notes


def test_ctrl_c_to_the_process_group_then_the_same_command_finishes(run, slow) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C (SIGINT to Snakemake's process group, as a terminal sends it) during the measurement
    session: the run stops with no group's record left to trust, and the same command measures the
    session again and finishes."""
    copy, env, _ = run
    ns = "cpu-interrupted"
    proc = start(copy, env, ns)
    wait_for_session(copy, ns)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert not fake_device.measuring(copy.parent / "bin"), "the interrupted run left its capture running"
    art = copy / "artifacts" / ns / "measure" / "layernorm"
    assert not list(art.glob("*/record.json")), out[-2000:]
    again = finish(copy, env, ns)
    assert again.returncode == 0, again.stderr[-2000:]
    assert repo_copy.job_counts(again.stdout + again.stderr)["measure"] == 1
    assert (copy / "report" / ns / "field_note.md").is_file()


def test_job_times_say_where_the_time_went(run, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    copy, _, _ = run
    art = copy / "artifacts" / NS
    assert cli(["job-times", NS, "--artifacts", str(copy / "artifacts")]) == 0
    out = capsys.readouterr().out
    table = pd.read_csv(art / "tables" / "job_times.csv")
    assert len(table) == len(list((art / "benchmarks").rglob("*.tsv")))
    assert set(table["rule"]) >= {"build", "measure", "tables", "render"} and (table["seconds"] >= 0).all()
    assert "command: snakemake --cores 1 report:" in out and "success" in out
    measure_total = table.loc[table["rule"] == "measure", "seconds"].sum()
    assert f"measure              1 {measure_total:>9.1f}" in out


@pytest.fixture
def slow(run):  # type: ignore[no-untyped-def]
    """The stand-in device's session takes 60 s (or what the test writes there) while the test
    runs: far longer than a stopped run takes to stop, so a stand-in that outlives its run is still
    there to be found (`fake_device.measuring`)."""
    sleep = run[0].parent / "bin" / "sleep-s"
    sleep.write_text("60")
    yield sleep
    sleep.unlink(missing_ok=True)


def start(copy: Path, env: dict[str, str], ns: str) -> subprocess.Popen[str]:
    """The main command for namespace `ns`, in a session of its own."""
    return subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", "report", "--config", f"namespace={ns}"],
                            cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finish(copy: Path, env: dict[str, str], ns: str) -> subprocess.CompletedProcess[str]:
    """The same command again, the stand-in at full speed."""
    (copy.parent / "bin" / "sleep-s").unlink(missing_ok=True)
    return snakemake(copy, env, "--cores", "1", "report", "--config", f"namespace={ns}")


def wait_for_session(copy: Path, ns: str) -> None:
    """Until the measurement session's process runs (its plan is written)."""
    plan = copy / "artifacts" / ns / "measure" / "session.plan.json"
    deadline = time.time() + 300
    while time.time() < deadline and not plan.is_file():
        time.sleep(0.2)
    assert plan.is_file(), "the session never started"


def test_ctrl_c_to_snakemake_alone_then_the_same_command_finishes(run, slow) -> None:  # type: ignore[no-untyped-def]
    """SIGINT to Snakemake's process only (kill -INT <pid>), not its process group: Snakemake waits
    for the running job (the session, 3 s here), and the default profile's rerun-incomplete lets the
    same command finish the run."""
    copy, env, _ = run
    slow.write_text("3")
    ns = "cpu-sigint-alone"
    proc = start(copy, env, ns)
    wait_for_session(copy, ns)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out[-2000:]
    assert not fake_device.measuring(copy.parent / "bin"), "the interrupted run left its capture running"
    again = finish(copy, env, ns)
    assert again.returncode == 0, again.stderr[-2000:]
    assert repo_copy.job_counts(again.stdout + again.stderr)["measure"] == 1


def test_after_a_kill_the_lock_names_the_way_forward(run, slow) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL leaves Snakemake's lock: the next command says to unlock, and `snakemake --unlock`
    then the same command finishes the run (docs/faults.md)."""
    copy, env, _ = run
    ns = "cpu-killed"
    proc = start(copy, env, ns)
    wait_for_session(copy, ns)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert not fake_device.measuring(copy.parent / "bin"), "the killed run left its capture running"
    locked = finish(copy, env, ns)
    assert locked.returncode != 0 and "--unlock" in locked.stdout + locked.stderr
    assert snakemake(copy, env, "--unlock", "--config", f"namespace={ns}").returncode == 0
    again = finish(copy, env, ns)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (copy / "report" / ns / "field_note.md").is_file()


def test_a_run_that_would_write_into_retained_evidence_is_refused(run) -> None:  # type: ignore[no-untyped-def]
    """The finished namespace is read-only: a changed setting that would rerun its groups is
    refused before any job runs, in one sentence naming the ways forward; a dry run shows the jobs."""
    copy, env, _ = run
    tables = copy / "artifacts" / NS / "tables"
    before = {p.name: p.read_bytes() for p in tables.glob("*.csv")}
    refused = snakemake(copy, env, "--cores", "1", "report", "--config", "capture={rounds: 20}")
    assert refused.returncode != 0
    assert (f"namespace {NS} is retained evidence (its report is finished) and is read-only: write a new namespace "
            f"(--config namespace=NEW), or set 'overwrite: {NS}' in the config") in refused.stderr
    assert "Traceback" not in refused.stderr
    assert {p.name: p.read_bytes() for p in tables.glob("*.csv")} == before
    census = snakemake(copy, env, "--cores", "1", "census", "--forcerun", "build")
    assert census.returncode != 0 and "is retained evidence" in census.stderr
    dry = snakemake(copy, env, "-n", "report", "--config", "capture={rounds: 20}", f"overwrite={NS}")
    assert dry.returncode == 0 and repo_copy.job_counts(dry.stdout)["measure"] == 1


def test_a_finished_namespace_is_bundled_by_its_target_and_stays_unchanged(run) -> None:  # type: ignore[no-untyped-def]
    """The bundle writes only under bundles/, so the retained namespace's target makes it (the
    README's `snakemake --cores 1 bundle`, naming the namespace), and the namespace, its command
    log included, is left byte for byte as it was."""
    copy, env, _ = run
    evidence = [p for folder in (copy / "artifacts" / NS, copy / "report" / NS) for p in sorted(folder.rglob("*"))
                if p.is_file() and "logs" not in p.parts and "benchmarks" not in p.parts]
    before = {p: p.read_bytes() for p in evidence}
    made = snakemake(copy, env, "--cores", "1", "bundle", "--config", f"namespace={NS}")
    assert made.returncode == 0, made.stderr[-2000:]
    bundle = copy / "bundles" / f"{NS}.evidence.tar.gz"
    assert bundle.is_file()
    assert {p: p.read_bytes() for p in evidence} == before
    verified = subprocess.run([sys.executable, "-m", "harness", "verify", str(bundle)], cwd=copy, env=env,
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
