"""Provenance: the commit comes from git, or from EVIDENCE_GIT_COMMIT where the tree has no .git."""

from __future__ import annotations

import subprocess

import pytest

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
    monkeypatch.setenv("EVIDENCE_GIT_COMMIT", "0123abc")
    monkeypatch.setenv("EVIDENCE_GIT_DIRTY", "0")
    assert provenance.git_state() == {"commit": "0123abc", "dirty": False, "source": "EVIDENCE_GIT_COMMIT"}
    monkeypatch.setenv("EVIDENCE_GIT_DIRTY", "1")
    assert provenance.git_state()["dirty"] is True


def test_the_environment_wins_over_a_stale_copied_git(monkeypatch: pytest.MonkeyPatch) -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=provenance.ROOT)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    monkeypatch.setenv("EVIDENCE_GIT_COMMIT", "feedc0de")
    monkeypatch.setenv("EVIDENCE_GIT_DIRTY", "0")
    assert provenance.git_state() == {"commit": "feedc0de", "dirty": False, "source": "EVIDENCE_GIT_COMMIT"}


def test_versions_and_hosts_come_from_the_capture_jobs() -> None:
    metas = [{"versions": {"torch": "2.11.0", "python": "3.12.3"}, "host": "gpu-node-1"},
             {"versions": {"torch": "2.11.0", "python": "3.12.3"}, "host": "gpu-node-2"},
             {"versions": {"torch": "2.10.0", "python": "3.12.3"}, "host": "gpu-node-2"}]
    found, hosts = provenance.measured_with(metas)
    assert found == {"torch": "2.10.0; 2.11.0", "python": "3.12.3"}
    assert hosts == ["gpu-node-1", "gpu-node-2"]
    local, local_hosts = provenance.measured_with([{"op": "x"}])  # metadata from before this was recorded
    assert local == provenance.versions() and len(local_hosts) == 1
