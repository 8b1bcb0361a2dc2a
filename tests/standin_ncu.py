"""A stand-in `ncu` for CPU tests of the counters step (tests/standin_measure.py runs the step).

It plays `ncu ... --export BASE <python> -m harness group PLAN` and `ncu --import REPORT --csv
--page raw`. Profiling writes, as the report, a raw CSV export built from the real H200 exports
under tests/fixtures/ncu/ (layernorm 4096x768, one per base implementation), each implementation of
the plan's kernels inside the NVTX range 'capture/<impl>/0', as the group process opens it;
importing prints that report. What it does is chosen by a file `ncu-mode` beside it ('ok'; 'perm':
the driver refuses counter access; 'crash': the profiled process fails; 'unattributed': one more
kernel, first, inside the range 'capture' but no round range), since the counters step
starts ncu under a minimal environment. It notes what it was given (its arguments, the plan,
CUDA_VISIBLE_DEVICES) in `ncu-seen.json` beside it. Standard library only; nothing here is part of
the product."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncu"
PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"

STANDIN = """#!{python}
import sys
sys.path.insert(0, {tests!r})
import standin_ncu
sys.exit(standin_ncu.main(sys.argv[1:]))
"""


def install(bin_dir: Path, mode: str = "ok") -> Path:
    """Write the stand-in ncu (module docstring) into bin_dir; returns its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "ncu"
    path.write_text(STANDIN.format(python=sys.executable, tests=str(Path(__file__).parent)))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (bin_dir / "ncu-mode").write_text(mode)
    return path


def fixture_rows(base: str) -> tuple[list[str], list[str], list[list[str]]]:
    """(header, units, kernel rows) of the H200 raw export of layernorm 4096x768 `base`."""
    header, units, *rows = list(csv.reader(io.StringIO((FIXTURES / f"layernorm-4096x768-{base}.raw.csv").read_text())))
    return header, units, rows


def group_export(impls: list[str], unattributed: bool = False, group: tuple[str, str] | None = None) -> str:
    """A raw export of one group process: each implementation's fixture kernels inside its range
    (named for `group`, as a session names them; and, `unattributed`, a first kernel inside
    'capture' alone, as an untimed call inside that range was)."""
    return session_export([(group, impls)], unattributed)


def session_export(groups: list[tuple[tuple[str, str] | None, list[str]]], unattributed: bool = False) -> str:
    """A raw export of a session process: `group_export` of each (group, impls), one header."""
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    pairs = [(group, impl) for group, impls in groups for impl in impls]
    for n, (group, impl) in enumerate(pairs):
        where = f"{group[0]}/{group[1]}/" if group else ""
        header, units, rows = fixture_rows(impl.split(".")[0])
        if n == 0:
            writer.writerows([header, units])
            if unattributed:
                stray = list(rows[0])
                stray[header.index(PUSH_POP)] = '890  "<default domain>:capture:none:none:none:none:none:none" '
                writer.writerow(stray)
        at = header.index(PUSH_POP)
        for row in rows:
            row[at] = (f'890  "<default domain>:capture:none:none:none:none:none:none" '
                       f'"<default domain>:capture/{where}{impl}/0:none:none:none:none:none:none" ')
            writer.writerow(row)
    return out.getvalue()


def main(argv: list[str]) -> int:
    """The stand-in's command line (module docstring)."""
    here = Path(sys.argv[0]).resolve().parent
    mode = (here / "ncu-mode").read_text().strip()
    if "--import" in argv:
        sys.stdout.write(Path(argv[argv.index("--import") + 1]).read_text())
        return 0
    plan = json.loads(Path(argv[-1]).read_text())
    (here / "ncu-seen.json").write_text(json.dumps({"argv": argv, "plan": plan,
                                                    "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}))
    if mode == "perm":
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
              "on the target device 0.")
        return 1
    if mode == "crash":
        print("==ERROR== The application returned an error code (11).")
        return 11
    plans = plan["groups"] if "groups" in plan else [plan]
    export = session_export([((p["op"], p["shape"]), list(p["impls"])) for p in plans], unattributed=mode == "unattributed")
    Path(argv[argv.index("--export") + 1] + ".ncu-rep").write_text(export)
    print("==PROF== Report written")
    return 0
