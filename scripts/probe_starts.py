"""What each start costs on a GPU machine: the floor under a pipeline job and a GPU test tier.

Run on the GPU machine, from the repository root (after `source gpu-env.sh`):
    python3 scripts/probe_starts.py [--repeat 2] [--out DIR]
Each line is one command started from nothing (a fresh process), timed from its start to its
exit, `--repeat` times (the first may pay a cold file cache): a bare Python, the imports a step's
outer process and a group process make, torch's CUDA start, the GPU check a step makes before it
starts nsys (torch's and the torch-free one), and nsys and ncu around a process that does nothing
on the GPU and around one that launches a kernel, each with the options the pipeline gives them,
and ncu's export of the report it wrote. Nothing is measured on the GPU but those starts; the
figures say where a job's seconds go that its own phases (record.json `seconds`) do not hold.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KERNEL = "import torch; x = torch.ones(1 << 20, device='cuda'); print(float((x * 2).sum()))"
"""A process that starts CUDA through torch and launches its kernels (as the prime does)."""

SPANS = ("def spans():\n"
         "    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True); out = []\n"
         "    for _ in range(200):\n"
         "        s.record(); x * 2; e.record(); e.synchronize(); out.append(s.elapsed_time(e) * 1000)\n"
         "    return statistics.median(out)\n")


def ranged(n: int, stop: bool = True, spans: bool = False) -> str:
    """A process that opens a profiler range (cudaProfilerStart, as the group's capture does) with
    `n` kernels inside an NVTX range `capture`, closes it (cudaProfilerStop) unless `stop` is
    False (it then exits inside it), and prints how long each took inside it; with `spans`, also
    the median CUDA-event span of one kernel (200 samples) before the range and after it."""
    return ("import statistics, time, torch\n" + SPANS
            + "x = torch.ones(1 << 20, device='cuda'); [x * 2 for _ in range(50)]; torch.cuda.synchronize()\n"
            + ("before = spans()\n" if spans else "")
            + "t = time.perf_counter(); torch.cuda.profiler.start(); a = time.perf_counter()\n"
            + f"torch.cuda.nvtx.range_push('capture'); [x * 2 for _ in range({n})]; torch.cuda.nvtx.range_pop()\n"
            + "torch.cuda.synchronize(); b = time.perf_counter()\n"
            + ("torch.cuda.profiler.stop(); c = time.perf_counter()\n" if stop else "c = b\n")
            + ("after = spans()\n" if spans else "")
            + f"print(f'in it: profiler start {{a - t:.2f}} s, {n} kernels {{b - a:.2f}} s, '\n"
            + ("      f'profiler stop {c - b:.2f} s'" if stop else "      'no profiler stop'")
            + (" + f', span {before:.1f} us before, {after:.1f} us after')\n" if spans else ")\n"))




def commands(work: Path) -> list[tuple[str, list[str]]]:
    """(name, argv) of every start timed, in order."""
    py = sys.executable
    out: list[tuple[str, list[str]]] = [
        ("python, nothing imported", [py, "-c", "pass"]),
        ("import snakemake (a script job's preamble)", [py, "-c", "import snakemake.script"]),
        ("import harness.measure.step (a GPU step's outer process)", [py, "-c", "import harness.measure.step"]),
        ("import harness.tables.derive (a table job)", [py, "-c", "import harness.tables.derive"]),
        ("import torch", [py, "-c", "import torch"]),
        ("import torch, triton, cupy (a group process)", [py, "-c", "import torch, triton, cupy"]),
        ("torch: CUDA context and one kernel", [py, "-c", KERNEL]),
        ("GPU check through torch (require_gpu)", [py, "-c", "from harness.gpu.device import require_gpu as f; f()"]),
        ("GPU check without torch (require_visible_gpu)",
         [py, "-c", "from harness.gpu.device import require_visible_gpu as f; f()"]),
        ("preflight memory (gpu_memory_bytes)", [py, "-c", "from harness.gpu.preflight import gpu_memory_bytes as f; f()"]),
        ("snakemake's start: a dry run of the smoke config",
         [py, "-m", "snakemake", "-n", "--quiet=all", "report", "--configfile", "workflow/configs/smoke.yaml",
          "--config", "namespace=probe-starts"]),
    ]
    nsys, ncu = shutil.which("nsys"), shutil.which("ncu")
    if nsys:
        base = [nsys, "profile", "--trace", "cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite",
                "true", "--export", "sqlite", "-o"]
        ranges = [*base[:-3], "--capture-range", "cudaProfilerApi", "--capture-range-end", "stop", "--export", "sqlite"]
        out += [("nsys around python (no GPU work), with export", [*base, str(work / "n0"), py, "-c", "pass"]),
                ("nsys around torch + one kernel, with export", [*base, str(work / "n1"), py, "-c", KERNEL]),
                ("nsys around torch + one kernel, no export",
                 [*base[:-3], "-o", str(work / "n2"), py, "-c", KERNEL]),
                ("torch, 100 kernels in a profiler range, no tool", [py, "-c", ranged(100)]),
                ("nsys, whole process, 100 kernels in a profiler range", [*base, str(work / "n3"), py, "-c",
                                                                          ranged(100)]),
                ("nsys --capture-range cudaProfilerApi (the capture's), same",
                 [*ranges, "-o", str(work / "n4"), py, "-c", ranged(100)]),
                ("nsys --capture-range cudaProfilerApi, exit inside the range",
                 [*ranges, "-o", str(work / "n5"), py, "-c", ranged(100, stop=False)]),
                ("torch, spans before and after a profiler range, no tool", [py, "-c", ranged(100, spans=True)]),
                ("nsys --capture-range cudaProfilerApi, spans before and after",
                 [*ranges, "-o", str(work / "n6"), py, "-c", ranged(100, spans=True)])]
    if ncu:
        prof = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--force-overwrite"]
        out += [("ncu around python (no GPU work)", [*prof, "--export", str(work / "c0"), py, "-c", "pass"]),
                ("ncu around torch + one kernel", [*prof, "--export", str(work / "c1"), py, "-c", KERNEL]),
                ("ncu --import of that report (the export)",
                 [ncu, "--import", str(work / "c1.ncu-rep"), "--csv", "--page", "raw"])]
        from harness import ROOT as repo, config
        from harness.measure.counters import requested_metrics

        every = ",".join(requested_metrics(config.load(repo / "config.yaml")["counters"]["metrics"]))
        included = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", "capture/", "--force-overwrite"]
        out += [("ncu --nvtx-include capture/, 3 kernels, one metric",
                 [*included, "--metrics", "gpu__time_duration.sum", "--export", str(work / "c2"), py, "-c",
                  ranged(3)]),
                ("ncu --nvtx-include capture/, 3 kernels, the config's metrics",
                 [*included, "--metrics", every, "--export", str(work / "c3"), py, "-c", ranged(3)])]
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", help="also write the table into DIR/starts.txt")
    parser.add_argument("--only", help="time only the starts whose name holds this text")
    args = parser.parse_args(argv)
    lines = []
    with tempfile.TemporaryDirectory(prefix="probe-starts-") as work:
        for name, cmd in commands(Path(work)):
            if args.only and args.only not in name:
                continue
            took = []
            for _ in range(args.repeat):
                start = time.monotonic()
                proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=300)
                took.append(f"{time.monotonic() - start:5.2f}" + ("" if proc.returncode == 0 else f" (exit {proc.returncode})"))
                inside = [line for line in proc.stdout.decode(errors="replace").splitlines() if line.startswith("in it:")]
            lines.append(f"{name:60s} {'  '.join(took)} s" + (f"  ({inside[-1]})" if inside else ""))
            print(lines[-1], flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "starts.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
