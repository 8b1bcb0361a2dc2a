"""The main command with a baseline revision (--config baseline=HEAD), on the CPU with the
stand-in device, in a copy of the repository made a git repository of its own whose layer-norm
CUDA kernel was then changed: the revision's kernels and dispatch are read from git into the
namespace, built and censused from that source by that dispatch (another copy changes the dispatch
alone), and measured as cuda@HEAD and triton@HEAD in the same groups as the
current ones; the work tree is not touched; a revision git does not know stops the run first."""

from __future__ import annotations

import hashlib
import html
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import repo_copy

NS = repo_copy.PIPELINE_NS


def committed_copy(work: Path) -> Path:
    """A copy of the repository under `work`/repo with the pipeline config, made a git repository
    of its own whose one commit ('base') holds it as it is."""
    copy = repo_copy.copy_repo(work / "repo")
    (copy / "config.yaml").write_text(repo_copy.pipeline_config())
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    subprocess.run(["git", "add", "-A"], cwd=copy, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=copy, check=True)
    return copy


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str], str]:
    work = tmp_path_factory.mktemp("baseline")
    copy = committed_copy(work)
    source = copy / "kernels" / "layernorm" / "layernorm.cu"
    base_sha = hashlib.sha256(source.read_bytes()).hexdigest()
    source.write_text(source.read_text() + "\n// changed after the base commit\n")
    status = subprocess.run(["git", "status", "--porcelain"], cwd=copy, capture_output=True, text=True).stdout
    env = repo_copy.standin_env(copy, work)
    proc = repo_copy.snakemake(copy, env, "--cores", "1", "report", "--config", "baseline=HEAD")
    after = subprocess.run(["git", "status", "--porcelain"], cwd=copy, capture_output=True, text=True).stdout
    written = ("?? artifacts/", "?? report/")  # what the run wrote; nothing git tracks changed
    assert [line for line in after.splitlines() if not line.startswith(written)] == status.splitlines()
    return copy, proc, base_sha


def test_the_run_finishes(run: tuple[Path, subprocess.CompletedProcess[str], str]) -> None:
    copy, proc, _ = run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (copy / "report" / NS / "field_note.md").is_file()


def test_the_revisions_kernels_are_read_from_git_and_built_from_that_source(
        run: tuple[Path, subprocess.CompletedProcess[str], str]) -> None:
    copy, _, base_sha = run
    root = copy / "artifacts" / NS / "baseline" / "HEAD"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=copy, capture_output=True, text=True).stdout.strip()
    assert (root / "COMMIT").read_text().strip() == head
    assert hashlib.sha256((root / "kernels" / "layernorm" / "layernorm.cu").read_bytes()).hexdigest() == base_sha
    census = pd.read_csv(copy / "artifacts" / NS / "tables" / "census.csv")
    at_head = census[census["impl"] == "cuda@HEAD"]
    now = census[census["impl"] == "cuda"]
    assert len(at_head) > 0 and set(at_head["source_sha256"]) == {base_sha}
    assert base_sha not in set(now["source_sha256"])
    assert list(at_head["kernel"]) == list(now["kernel"])  # the two dispatches, the same, chose the same instances
    dispatch = Path("harness", "ops", "layernorm", "kernels.py")
    assert (root / dispatch).read_bytes() == (copy / dispatch).read_bytes()  # the revision's own dispatch
    record = json.loads((copy / "artifacts" / NS / "measure" / "layernorm" / "4096x768" / "record.json").read_text())
    assert record["baseline_dispatch"] == {"HEAD": "its own"} and record["baselines"] == {"HEAD": head}
    change = pd.read_csv(copy / "artifacts" / NS / "tables" / "change.csv")
    assert set(change["dispatch"]) == {"its own"}
    assert len(census[census["impl"] == "triton@HEAD"]) > 0


def test_the_revisions_own_dispatch_chooses_its_kernels(tmp_path: Path) -> None:
    """A change of the dispatch alone (layer norm's width read at run time again, after a commit
    that compiles it in): the revision's kernels are the ones its own dispatch chose, so the build
    and census of the baseline (the census table as its target) name the kernel with the width
    compiled in, and this checkout's the one that reads it."""
    copy = committed_copy(tmp_path)
    dispatch = copy / "harness" / "ops" / "layernorm" / "kernels.py"
    text = dispatch.read_text()
    assert "DEFAULT_FIXED_WIDTH = True" in text
    dispatch.write_text(text.replace("DEFAULT_FIXED_WIDTH = True", "DEFAULT_FIXED_WIDTH = False", 1))
    proc = repo_copy.snakemake(copy, repo_copy.standin_env(copy, tmp_path), "--cores", "1",
                               f"artifacts/{NS}/tables/census.csv", "--config", "baseline=HEAD")
    assert proc.returncode == 0, proc.stderr[-3000:]
    census = pd.read_csv(copy / "artifacts" / NS / "tables" / "census.csv")
    kernels = {impl: {k.split("<")[0] for k in census.loc[census["impl"] == impl, "kernel"]} for impl in ("cuda", "cuda@HEAD")}
    assert kernels == {"cuda": {"layernorm_fwd_vec4"}, "cuda@HEAD": {"layernorm_fwd_vec4_fixed"}}


def test_the_revision_is_measured_in_the_same_groups(run: tuple[Path, subprocess.CompletedProcess[str], str]) -> None:
    copy, _, _ = run
    for shape in ("4096x768", "8192x768"):
        record = json.loads((copy / "artifacts" / NS / "measure" / "layernorm" / shape / "record.json").read_text())
        assert {"cuda", "triton", "cuda@HEAD", "triton@HEAD"} <= set(record["passed"])
        assert record["calls_per_round"]["cuda@HEAD"] == record["calls_per_round"]["cuda"]
    kt = pd.read_csv(copy / "artifacts" / NS / "tables" / "kernel_time.csv")
    assert {"cuda@HEAD", "triton@HEAD"} <= set(kt["impl"])


def test_a_revision_git_does_not_know_stops_the_run_in_one_sentence(tmp_path: Path) -> None:
    copy = repo_copy.copy_repo(tmp_path / "repo")
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    proc = repo_copy.snakemake(copy, repo_copy.env(copy), "-n", "report", "--config", "baseline=no-such-branch")
    assert proc.returncode != 0
    assert "config: baseline 'no-such-branch' is no commit of the repository" in proc.stderr
    assert not (copy / "artifacts").exists() or not any((copy / "artifacts").iterdir())


def test_the_change_table_sets_each_kernel_against_itself_at_the_revision(
        run: tuple[Path, subprocess.CompletedProcess[str], str]) -> None:
    copy, _, _ = run
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=copy, capture_output=True, text=True).stdout.strip()
    change = pd.read_csv(copy / "artifacts" / NS / "tables" / "change.csv")
    assert sorted(zip(change["shape"], change["impl"])) == [("4096x768", "cuda"), ("4096x768", "triton"),
                                                             ("8192x768", "cuda"), ("8192x768", "triton")]
    assert set(change["revision"]) == {"HEAD"} and set(change["commit"]) == {head}
    kt = pd.read_csv(copy / "artifacts" / NS / "tables" / "kernel_time.csv").set_index(["shape", "impl"])
    for row in change.to_dict("records"):
        assert row["current_us"] == kt.loc[(row["shape"], row["impl"]), "kernel_time_us"]
        assert row["baseline_us"] == kt.loc[(row["shape"], row["impl"] + "@HEAD"), "kernel_time_us"]
        assert row["ratio_lo"] <= row["ratio"] <= row["ratio_hi"]
    # the stand-in device times ours at the revision as ours: an A/A pair, which must read "same"
    assert set(change["verdict"]) == {"same"}, change[["shape", "impl", "ratio_lo", "ratio_hi"]].to_string()


def test_every_report_opens_with_the_change_and_summary_json_holds_it(
        run: tuple[Path, subprocess.CompletedProcess[str], str]) -> None:
    copy, _, _ = run
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=copy, capture_output=True, text=True).stdout.strip()
    note = (copy / "report" / NS / "field_note.md").read_text()
    assert note.index("## This change against HEAD") < note.index("## Claims at the default shapes")
    assert head in note.split("## Claims")[0]
    comment = (copy / "report" / NS / "issue_comment.md").read_text()
    assert comment.index("**This change against") < comment.index("**Flags**" if "**Flags**" in comment else "**No flags**")
    page = (copy / "report" / NS / "index.html").read_text()
    assert page.index('<h2 id="this-change-against-head">') < page.index("Claims at the default shapes")
    # the contents lead with it, under the anchor its heading has on the page and on GitHub
    assert "\nContents: [This change](#this-change-against-head) · " in note
    assert '<li><a href="#this-change-against-head">This change</a></li>' in page
    change = pd.read_csv(copy / "artifacts" / NS / "tables" / "change.csv")
    summary = json.loads((copy / "artifacts" / NS / "summary.json").read_text())
    got = [(r["op"], r["shape"], r["impl"], r["revision"], r["commit"], r["ratio"], r["verdict"]) for r in summary["change"]]
    want = [(r["op"], r["shape"], r["impl"], r["revision"], r["commit"], r["ratio"], r["verdict"])
            for r in change.to_dict("records")]
    assert got == want and got
    assert {r["dispatch"] for r in summary["change"]} == {"its own"}
    said = ("The revision's kernels ran as its own dispatch chose and launched them (harness/ops/layernorm/kernels.py "
            "at that commit), so a change of which kernel serves a shape is in these rows.")
    assert said in note.split("## Claims")[0] and said in comment and said in html.unescape(page)
    section = note.split("## This change against HEAD")[1].split("## Claims")[0]
    for r in summary["change"]:  # each row of the note's table is the summary's row, as printed
        assert f"| {r['op']} | {r['shape']} | {r['impl']} |" in section
        assert f"{r['ratio']:,.3f} [{r['lo']:,.3f}, {r['hi']:,.3f}] | **{r['verdict']}**" in section
    # the change was a comment: every kernel runs the revision's code (the census; a Triton cubin's bytes
    # differ, as they hold the source's path), so
    # every row is an A/A pair, and the reports say so
    census = pd.read_csv(copy / "artifacts" / NS / "tables" / "census.csv")
    for impl in ("cuda", "triton"):
        here, there = (set(census.loc[census["impl"] == i, "sass_sha256"]) for i in (impl, impl + "@HEAD"))
        assert here == there and len(here) >= 1
    assert f"At {len(summary['change'])} rows the census shows the kernels serving the shape run the revision's " \
           "code, their SASS instruction for instruction (binary: unchanged)" in section
    assert "| verdict | control | binary |" in section and section.count("| unchanged |") == len(summary["change"])
    assert section.count("| unchanged |") == comment.count("| unchanged |")
    assert page.count("<td>unchanged</td>") == len(summary["change"])
    # and those A/A pairs feed the session's flag: it names exactly the rows that came out faster or slower
    wrong = [r for r in summary["change"] if r["verdict"] in ("faster", "slower")]
    flags = [f for f in summary["flags"] if f.startswith("Known answers:") and "A/A pairs" in f]
    assert len(flags) == (1 if wrong else 0)
    for r in wrong:
        assert f"{r['op']} {r['shape']} {r['impl']}@{r['revision']}: {r['verdict']}, {r['ratio']:.3f}" in flags[0]


def test_several_baselines_give_the_stage_table_oldest_first(tmp_path: Path) -> None:
    copy = repo_copy.copy_repo(tmp_path / "repo")
    (copy / "config.yaml").write_text(repo_copy.pipeline_config())
    source = copy / "kernels" / "layernorm" / "layernorm.cu"
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    for n, date in enumerate(("2026-01-01T00:00:00+00:00", "2026-02-01T00:00:00+00:00")):
        source.write_text(source.read_text() + f"\n// step {n}\n")
        subprocess.run(["git", "add", "-A"], cwd=copy, check=True)
        subprocess.run([*git, "commit", "-qm", f"step {n}"], cwd=copy, check=True,
                       env={**repo_copy.env(copy), "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date})
    env = repo_copy.standin_env(copy, tmp_path)
    proc = repo_copy.snakemake(copy, env, "--cores", "1", "report", "--config", "baseline=[HEAD,HEAD~1]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    change = pd.read_csv(copy / "artifacts" / NS / "tables" / "change.csv")
    assert set(change["revision"]) == {"HEAD", "HEAD-1"}
    note = (copy / "report" / NS / "field_note.md").read_text()
    table = note.split("### Every build, oldest first")[1].split("## Claims")[0]
    rows = [line for line in table.splitlines() if line.startswith("| layernorm | 4096x768 | cuda |")]
    assert [row.split(" | ")[3] for row in rows] == ["HEAD-1", "HEAD", "this checkout"]
    assert "(2026-01-01)" in rows[0] and "(2026-02-01)" in rows[1]
    # both steps were comments: every revision's build runs this checkout's code, and the table says so
    assert [row.split("|")[-2].strip() for row in rows] == ["this checkout's", "this checkout's", ""]


def test_a_namespace_with_a_baseline_is_bundled_and_verified(run: tuple[Path, subprocess.CompletedProcess[str], str],
                                                            tmp_path: Path) -> None:
    """Its implementations 'cuda@HEAD' are plain enough to re-derive from: verify re-derives the
    tables and reports, the change table among them, and finds them as the run wrote them."""
    copy, _, _ = run
    env = repo_copy.standin_env(copy, tmp_path)
    bundle = tmp_path / "b.evidence.tar.gz"
    made = subprocess.run([sys.executable, "-m", "harness", "bundle", NS, "--out", str(bundle)], cwd=copy, env=env,
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    verified = subprocess.run([sys.executable, "-m", "harness", "verify", str(bundle)], cwd=copy, env=env,
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
