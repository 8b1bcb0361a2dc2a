"""Provenance: the commit comes from git, or from EVIDENCE_GIT_COMMIT where the tree has no .git."""

from __future__ import annotations

import subprocess

import pytest

from harness.errors import EvidenceError
from harness.report import provenance


def test_git_checkout_gives_its_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVIDENCE_GIT_COMMIT", raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=provenance.ROOT)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    state = provenance.git_state()
    assert state["commit"] == head.stdout.strip() and state["source"] == "git"


def test_without_git_the_environment_names_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_git(*args, **kwargs):  # type: ignore[no-untyped-def]
        return subprocess.CompletedProcess(args, 128, "", "fatal: not a git repository")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    monkeypatch.delenv("EVIDENCE_GIT_COMMIT", raising=False)
    assert provenance.git_state()["commit"] == "unknown"
    monkeypatch.setenv("EVIDENCE_GIT_COMMIT", "0123abc000000000000000000000000000000000")
    monkeypatch.setenv("EVIDENCE_GIT_DIRTY", "0")
    assert provenance.git_state() == {"commit": "0123abc000000000000000000000000000000000", "dirty": False, "source": "EVIDENCE_GIT_COMMIT"}
    monkeypatch.setenv("EVIDENCE_GIT_DIRTY", "1")
    assert provenance.git_state()["dirty"] is True


@pytest.mark.parametrize("value", ["0123abc", "0123ABC000000000000000000000000000000000", "0123abc000000000000000000000000000000000; rm -rf /", ""])
def test_a_commit_that_is_not_a_full_hash_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("EVIDENCE_GIT_COMMIT", value)
    with pytest.raises(EvidenceError, match="not a full commit hash"):
        provenance.git_state()


def test_in_a_checkout_the_environment_must_name_its_head(monkeypatch: pytest.MonkeyPatch) -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=provenance.ROOT)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    monkeypatch.setenv("EVIDENCE_GIT_COMMIT", "f" * 40)
    with pytest.raises(EvidenceError, match=f"this checkout is at {head.stdout.strip()}"):
        provenance.git_state()
    monkeypatch.setenv("EVIDENCE_GIT_COMMIT", head.stdout.strip())
    assert provenance.git_state()["commit"] == head.stdout.strip()


def test_versions_and_hosts_come_from_the_capture_jobs() -> None:
    metas = [{"versions": {"torch": "2.11.0", "python": "3.12.3"}, "host": "gpu-node-1"},
             {"versions": {"torch": "2.11.0", "python": "3.12.3"}, "host": "gpu-node-2"},
             {"versions": {"torch": "2.10.0", "python": "3.12.3"}, "host": "gpu-node-2"}]
    found, hosts = provenance.measured_with(metas)
    assert found == {"torch": "2.10.0; 2.11.0", "python": "3.12.3"}
    assert hosts == ["gpu-node-1", "gpu-node-2"]
    local, local_hosts = provenance.measured_with([{"op": "x"}])  # metadata from before this was recorded
    assert local == provenance.versions() and len(local_hosts) == 1


def test_kernel_modules_are_counted_by_where_they_came_from() -> None:
    records = [{"modules": [{"source": "a.cu", "kernel": "k<1>", "options": "-std=c++17", "module": "build cache 0123abcd"},
                            {"source": "a.cu", "kernel": "k<2>", "options": "-std=c++17", "module": "compiled"}]},
               {"modules": [{"source": "b.cu", "kernel": "f", "options": "", "module": "build cache 4567ef01"}]},
               {}]  # a record of before the modules were listed
    assert provenance.kernel_modules(records) == {"build cache": 2, "compiled": 1}
    assert provenance.kernel_modules([{}]) == {}
