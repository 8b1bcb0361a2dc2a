"""Baseline revisions (harness.baseline) on the CPU: revisions resolve to full commits with a label
or are refused in one sentence; a commit's kernels are read from git's objects without touching
the work tree or the index; and the offline build compiles the kernels of another revision with
that revision's own dispatch (harness.ops.dispatch, harness.launch.sources), CUDA through NVRTC and
Triton through its compiler, where the two revisions' sources differ (layer norm's CUDA kernel
changed in 0fcfb63)."""

from __future__ import annotations

import hashlib
import importlib
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import ROOT, baseline
from harness.build import toolchain
from harness.build.build import build_census
from harness.errors import ConfigError, EvidenceError
from harness.launch import sources

CHANGED = "0fcfb63"
"""A commit that changed kernels/layernorm/layernorm.cu: its parent has the earlier source."""


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def has_history() -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{CHANGED}^"], cwd=ROOT, capture_output=True).returncode == 0


needs_history = pytest.mark.skipif(not has_history(), reason="this clone lacks the history the test reads")


def test_a_revision_resolves_to_its_full_commit_and_a_label() -> None:
    (head,) = baseline.resolve("HEAD")
    assert head.commit == git("rev-parse", "HEAD").strip() and head.label == "HEAD"
    assert baseline.label("HEAD~1") == "HEAD-1" and baseline.label("feature/x y") == "feature-x-y"
    assert baseline.split("cuda@main") == ("cuda", "main") and baseline.split("cuda") == ("cuda", None)


@pytest.mark.parametrize(("given", "says"), [
    ("nosuch-branch-xyz", "baseline 'nosuch-branch-xyz' is no commit of the repository"),
    ("--output=/tmp/x", "is not a git revision"),
    ("", "is not a git revision"),
])
def test_a_revision_git_does_not_know_is_one_sentence(given: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as info:
        baseline.resolve([given])
    assert "\n" not in str(info.value)


def test_two_revisions_of_one_label_are_refused() -> None:
    with pytest.raises(ConfigError, match="share the label"):
        baseline.resolve(["HEAD~0", "HEAD^0"])  # both label to 'HEAD-0'


@needs_history
def test_a_commits_kernels_come_from_git_without_touching_the_work_tree(tmp_path: Path) -> None:
    index = ROOT / git("rev-parse", "--git-path", "index").strip()  # a linked worktree's .git is a file
    before = (git("status", "--porcelain=v1", "-z"), index.stat().st_mtime_ns)
    (rev,) = baseline.resolve(f"{CHANGED}^")
    root = baseline.extract(rev.commit, tmp_path / "at", ["layernorm", "transpose"])
    old = (root / "kernels" / "layernorm" / "layernorm.cu").read_bytes()
    assert old == subprocess.run(["git", "show", f"{rev.commit}:kernels/layernorm/layernorm.cu"], cwd=ROOT,
                                 capture_output=True, check=True).stdout
    assert old != (ROOT / "kernels" / "layernorm" / "layernorm.cu").read_bytes()
    assert (root / "kernels" / "transpose" / "transpose_triton.py").is_file()
    kept = {p.relative_to(root / "kernels").as_posix() for p in (root / "kernels").rglob("*") if p.is_file()}
    listed = set(git("ls-tree", "-r", "--name-only", rev.commit, "--", "kernels/layernorm", "kernels/transpose").split())
    assert kept == {n.removeprefix("kernels/") for n in listed if not n.endswith(".md") and "/data/" not in n}
    assert "layernorm/notebook.md" not in kept and "layernorm/layernorm.cu" in kept  # sources, not notes
    assert not (root / "kernels" / "matmul").exists()  # only the operations asked for
    assert (root / "COMMIT").read_text().strip() == rev.commit
    assert (git("status", "--porcelain=v1", "-z"), index.stat().st_mtime_ns) == before
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


@needs_history
def test_an_operation_the_commit_lacks_is_one_sentence(tmp_path: Path) -> None:
    (rev,) = baseline.resolve("HEAD")
    with pytest.raises(EvidenceError, match=r"has no kernels/nosuch/"):
        baseline.extract(rev.commit, tmp_path / "at", ["nosuch"])


@needs_history
@pytest.mark.skipif(toolchain.load_nvrtc() is None, reason="no NVRTC here to build with")
def test_the_build_compiles_another_revisions_kernels_with_its_own_dispatch(tmp_path: Path) -> None:
    (rev,) = baseline.resolve(f"{CHANGED}^")
    root = baseline.extract(rev.commit, tmp_path / "at", ["layernorm"])
    assert (root / "harness" / "ops" / "layernorm" / "kernels.py").read_text() == git(
        "show", f"{rev.commit}:harness/ops/layernorm/kernels.py")
    shapes = [(4096, 768)]
    now = build_census("layernorm", "cuda", shapes)
    then = build_census("layernorm", "cuda", shapes, sources_root=root)
    old_sha = hashlib.sha256((root / "kernels" / "layernorm" / "layernorm.cu").read_bytes()).hexdigest()
    assert [r["source_sha256"] for r in then] == [old_sha] * len(then)
    assert {r["source_sha256"] for r in now}.isdisjoint({old_sha})
    # that revision's dispatch reads the width at run time (it has no kernel with the width compiled
    # in); this checkout's compiles it in: each build names the kernels its own dispatch chose
    assert [r["kernel"].split("<")[0] for r in then] == ["layernorm_fwd_vec4"]
    assert [r["kernel"].split("<")[0] for r in now] == ["layernorm_fwd_vec4_fixed"]
    assert sources.kernels_dir() == ROOT / "kernels" and sources.tree() is None  # this checkout's again
    triton_then = build_census("layernorm", "triton", shapes, sources_root=root)
    triton_sha = hashlib.sha256((root / "kernels" / "layernorm" / "layernorm_triton.py").read_bytes()).hexdigest()
    assert triton_then and {r["source_sha256"] for r in triton_then} == {triton_sha}


@needs_history
@pytest.mark.skipif(toolchain.load_nvrtc() is None, reason="no NVRTC here to build with")
def test_sources_extracted_without_a_dispatch_are_built_with_this_one(tmp_path: Path) -> None:
    """A revision's folder extracted before dispatches were (kernels/ alone) is dispatched by this
    checkout, which chooses layernorm_fwd_vec4_fixed, a kernel that revision does not define: the
    build says so in one sentence, naming the kernel and the way out, not NVRTC's log."""
    (rev,) = baseline.resolve(f"{CHANGED}^")
    root = baseline.extract(rev.commit, tmp_path / "at", ["layernorm"])
    shutil.rmtree(root / "harness")
    with pytest.raises(EvidenceError, match=r"defines no layernorm_fwd_vec4_fixed, which this checkout's "
                                            r"dispatch launches .*as a variant of this checkout\)\.$") as info:
        build_census("layernorm", "cuda", [(4096, 768)], sources_root=root)
    assert "\n" not in str(info.value) and str(root) in str(info.value)
    assert build_census("layernorm", "cuda", [(64, 771)], sources_root=root)  # the scalar kernel is there


def test_a_dispatch_that_does_not_load_is_one_sentence(tmp_path: Path) -> None:
    """A revision's kernels.py that no longer fits this checkout's launch layer (here it imports a
    name the launch layer does not have) stops the build, and the bind, in one sentence."""
    import torch

    from harness import ops

    shutil.copytree(ROOT / "kernels" / "layernorm", tmp_path / "kernels" / "layernorm")
    dispatch = ops.dispatch_file("layernorm", tmp_path)
    dispatch.parent.mkdir(parents=True)
    dispatch.write_text("from harness.launch.cuda import launch_of_a_later_age\n")
    with pytest.raises(EvidenceError, match=r"kernels\.py does not load: ImportError: cannot import name "
                                            r"'launch_of_a_later_age'") as info:
        build_census("layernorm", "cuda", [(4096, 768)], sources_root=tmp_path)
    assert "\n" not in str(info.value)
    params = {"eps": 1e-5, "baselines": {"old": str(tmp_path)}}
    x = torch.ones(4, 8)
    with pytest.raises(baseline.CannotMeasure, match=r"^cuda@old cannot be measured at old: EvidenceError: .*"
                                                     r"kernels\.py does not load: ImportError"):
        ops.launcher(ops.get("layernorm"), "cuda@old", params)({"x": x, "w": torch.ones(8), "b": torch.ones(8)},
                                                              torch.empty(4, 8), params)
    assert ops.dispatch("layernorm") is importlib.import_module("harness.ops.layernorm.kernels")


def test_a_module_the_tree_lacks_is_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "kernels").mkdir()
    with sources.at(tmp_path), pytest.raises(EvidenceError, match="have no kernels/layernorm/layernorm_triton.py"):
        sources.module("kernels.layernorm.layernorm_triton")
    assert sources.tag() == ""


def test_ours_at_a_revision_that_cannot_be_bound_says_so_in_one_sentence(tmp_path: Path) -> None:
    """The launcher of cuda@old wraps whatever stops the bind there (here the CPU tensors the
    launcher refuses) in one sentence naming the implementation and the revision."""
    import torch

    from harness import ops

    op = ops.get("layernorm")
    params = {"eps": 1e-5, "baselines": {"old": str(tmp_path)}}
    x = torch.ones(4, 8)
    with pytest.raises(baseline.CannotMeasure, match=r"^cuda@old cannot be measured at old: EvidenceError: ") as info:
        ops.launcher(op, "cuda@old", params)({"x": x, "w": torch.ones(8), "b": torch.ones(8)}, torch.empty(4, 8), params)
    assert "\n" not in str(info.value)
    with pytest.raises(EvidenceError, match="which this run does not build"):
        ops.launcher(op, "cuda@other", params)


def test_a_check_that_cannot_bind_at_its_revision_is_recorded_and_the_group_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.measure import group

    def run_check(op: str, shape: str, impl: str, params: dict, seed: int) -> dict:
        if impl == "cuda@old":
            raise baseline.CannotMeasure("cuda@old cannot be measured at old: CompileException: no such template")
        return {"op": op, "shape": shape, "impl": impl, "passed": True}

    monkeypatch.setattr(group, "run_check", run_check)
    impls = ["cuda", "cuda@old", "triton"]
    plan = {"op": "layernorm", "shape": "8x8", "impls": impls, "params": {}, "seed": 1}
    records = group.checks(plan, group.Progress(None))
    assert [records[i]["passed"] for i in impls] == [True, False, True]
    assert records["cuda@old"]["error"] == "cuda@old cannot be measured at old: CompileException: no such template"


@needs_history
def test_a_copy_without_the_history_takes_the_sources_already_extracted(tmp_path: Path) -> None:
    (rev,) = baseline.resolve("HEAD")
    baseline.extract(rev.commit, tmp_path / "baseline" / "HEAD", ["layernorm"])
    bare = tmp_path / "bare"
    bare.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=bare, check=True)  # a repository that does not know the commit
    (again,) = baseline.resolve("HEAD", bare, tmp_path / "baseline")
    assert again == rev
    with pytest.raises(ConfigError, match="is no commit of the repository"):
        baseline.resolve("main-of-nothing", bare, tmp_path / "baseline")


def test_the_build_cache_keys_a_revisions_build_by_its_kernels_and_its_dispatch(tmp_path: Path) -> None:
    """The cache key of a build at a revision follows that revision's kernels and, where its folder
    holds one, its dispatch; not this checkout's kernels (harness.build.cache.key)."""
    from harness import ops
    from harness.build import cache

    shutil.copytree(ROOT / "kernels" / "layernorm", tmp_path / "kernels" / "layernorm")

    def key() -> str:
        return cache.key("layernorm", "cuda", [(4096, 768)], "sm_90", sources_root=tmp_path)

    without = key()
    dispatch = ops.dispatch_file("layernorm", tmp_path)
    dispatch.parent.mkdir(parents=True)
    shutil.copyfile(ops.dispatch_file("layernorm"), dispatch)
    own = key()
    assert own != without  # the revision's own dispatch now decides
    dispatch.write_text(dispatch.read_text() + "\n# changed\n")
    assert key() not in (own, without)
    cu = tmp_path / "kernels" / "layernorm" / "layernorm.cu"
    before = key()
    cu.write_text(cu.read_text() + "\n// changed\n")
    assert key() != before
