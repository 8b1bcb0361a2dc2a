"""The README's main command end to end on a real GPU, on the smoke configuration
(workflow/configs/smoke.yaml: two small shapes of one operation, counters on, ceilings off), in a
copy of the repository: it finishes, renders every report, every counters row is `ok`, and the
report says the ceilings were not measured (tests/test_ceilings_gpu.py measures them). The smoke tier
(`-m 'gpu and smoke'`) holds it. The test holds the GPU's lock (tests/conftest.py), so the run
takes its locks under the test's folder; the test process itself holds a CUDA context from earlier
tests, which the run's quiet-GPU watch must take as its own (harness.gpu.watch.lineage). A random
token in snakemake's environment reaches no file of the namespace, raw reports included, and the
raw reports are kept (issue 31: nsys records the environment of every process above it). The run's
own tables show the capture attributed: every call of every captured round is one kernel of its
implementation, and the sweep's ratio lies inside its interval. The session's export is split by
group: each group's part holds its own rounds, and `nsys stats` prints for it, byte for byte,
what the pipeline's reader prints."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import gpu_group
import pandas as pd
import pytest
import repo_copy
import yaml

from harness import ROOT, config, tools
from harness.errors import EvidenceError
from harness.gpu.device import gpu_state
from harness.gpu.watch import others_only, wait_until_quiet
from harness.tables import derive, stats

NS = "gpu-smoke"
SMOKE = yaml.safe_load((ROOT / "workflow" / "configs" / "smoke.yaml").read_text())
SHAPE = SMOKE["operations"]["layernorm"]["default"]
ROUNDS = SMOKE["capture"]["rounds"]


@pytest.mark.smoke
def test_the_main_command_on_the_smoke_config_renders_with_every_counter(tmp_path: Path) -> None:
    import torch

    torch.zeros(1, device="cuda")  # this process holds a CUDA context, as a test run does
    gpu_group.need_nsys(gpu_group.cfg_with())
    copy = repo_copy.copy_repo(tmp_path / "repo")
    secret = "tok_" + secrets.token_hex(16)  # in snakemake's own environment, so in every process above nsys
    environment = repo_copy.env(copy, EVIDENCE_LOCK_DIR=str(tmp_path / "locks"), AWS_SECRET_ACCESS_KEY=secret)
    proc = repo_copy.snakemake(copy, environment, "--cores", "1", "report", "--configfile",
                               "workflow/configs/smoke.yaml", "--config", f"namespace={NS}", timeout=540)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for name in ("field_note.md", "issue_comment.md", "index.html"):
        assert (copy / "report" / NS / name).is_file(), name
    assert (copy / "artifacts" / NS / "summary.json").is_file()
    counters = pd.read_csv(copy / "artifacts" / NS / "tables" / "counters.csv")
    assert len(counters) > 0
    assert set(counters["status"]) == {"ok"}, counters[["impl", "status", "reason"]].to_string()
    assert "its check failed" not in proc.stdout + proc.stderr
    assert not (copy / "artifacts" / NS / "tables" / "ceilings.csv").exists()
    assert "not measured in this run (`ceilings.enabled: false`)" in (copy / "report" / NS / "field_note.md").read_text()
    written = [p for folder in (copy / "artifacts" / NS, copy / "report" / NS) for p in folder.rglob("*") if p.is_file()]
    holding = [str(p.relative_to(copy)) for p in written
               if secret.encode() in p.read_bytes() or secret.encode("utf-16-le") in p.read_bytes()]
    assert holding == []
    group = copy / "artifacts" / NS / "measure" / "layernorm" / SHAPE
    record = json.loads((group / "record.json").read_text())
    assert record["passed"] == ["cuda", "triton", "torch"] and record["rounds"] == ROUNDS
    launches = pd.read_csv(group / "launches.csv")
    for impl in ("cuda", "triton"):  # one kernel per call, every call of every round attributed
        mine = launches[launches["impl"] == impl]
        assert len(mine) == ROUNDS * record["calls_per_round"][impl]
        assert sorted(mine["round"].unique()) == list(range(ROUNDS))
    assert set(counters["impl"]) == {"cuda", "triton", "torch"}
    assert not [p for p in written if ".partial" in p.name]
    sweeps = pd.read_csv(copy / "artifacts" / NS / "tables" / "sweep.csv").to_dict("records")
    assert len(sweeps) == 2
    for sweep in sweeps:
        assert sweep["cuda_vs_triton"] in stats.VERDICTS
        assert sweep["cuda_over_triton_lo"] <= sweep["cuda_over_triton"] <= sweep["cuda_over_triton_hi"]
    assert len(pd.read_csv(copy / "artifacts" / NS / "tables" / "rounds.csv.gz")) == 2 * 3 * ROUNDS
    reports = [p for p in written if p.name == "session.nsys-rep"]
    # the raw report is kept where nsys runs in a process namespace of its own (harness.tools.isolation)
    assert bool(reports) == bool(tools.isolation()), tools.isolation_note()
    (other,) = [s for s in SMOKE["operations"]["layernorm"]["sweep"] if s != SHAPE]
    assert derive.launch_rows(group / "capture.sqlite", "layernorm", other) == []  # each part holds its group only
    nsys = tools.find_nsys(None)
    for shape in (SHAPE, other):
        export = copy / "artifacts" / NS / "measure" / "layernorm" / shape / "capture.sqlite"
        out = tmp_path / f"stats-{shape}"
        subprocess.run([nsys, "stats", "-r", "cuda_gpu_kern_sum,nvtx_kern_sum", "--format", "csv", "--force-export",
                        "false", "-o", str(out), str(export)], check=True, capture_output=True, timeout=120)
        for command, report in (("kern-sum", "cuda_gpu_kern_sum"), ("nvtx-kern-sum", "nvtx_kern_sum")):
            ours = subprocess.run([sys.executable, "-m", "harness", "nsys", command, str(export), "--format", "csv"],
                                  check=True, capture_output=True, text=True, cwd=ROOT).stdout
            assert ours == Path(f"{out}_{report}.csv").read_text(), (shape, report)


def _stranger(ready: Path) -> int:
    """A process outside this one's lineage (its parent exits at once, so it is nobody's child
    here) that holds a CUDA context until killed: its pid."""
    code = (f"import torch, time, pathlib; torch.zeros(1, device='cuda'); torch.cuda.synchronize(); "
            f"pathlib.Path({str(ready)!r}).write_text('ready'); time.sleep(120)")
    sh = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{code}" >/dev/null 2>&1 & echo $!'],
                        capture_output=True, text=True, check=True)
    return int(sh.stdout.strip())


def test_another_process_on_the_gpu_is_waited_for_and_this_one_is_not(tmp_path: Path) -> None:
    import torch

    torch.zeros(1, device="cuda")
    policy = {**config.operational(gpu_group.cfg_with())["gpu_state"], "busy_utilization_pct": 100, "busy_wait_s": 3.0}
    read = others_only(gpu_state)
    state = read()
    if "pids" not in state:
        pytest.skip(f"NVML lists no compute processes here ({state.get('nvml')})")
    if os.getpid() not in state["pids"]:
        pytest.skip("NVML gives pids of another pid namespace here, so no process can be told apart")
    state, waited = wait_until_quiet(read, policy)
    assert state["other_processes"] == 0 and waited < 1.0  # this process and its context are the measurement's
    pid = _stranger(tmp_path / "ready")
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        with pytest.raises(EvidenceError, match=rf"pids \[{pid}\]"):
            wait_until_quiet(read, policy)
    finally:
        os.kill(pid, 9)
