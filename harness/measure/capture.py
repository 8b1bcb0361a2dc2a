"""Run one Nsight Systems capture around the harness target process and export it to SQLite.

No shell is involved: every command is an argument list. The captured process runs under a
minimal environment (an allowlist), and the environment rows nsys records in the export are
deleted and the file vacuumed, so no variable of the capturing shell reaches the evidence.
Outputs are written under temporary names and renamed only when complete.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.errors import EvidenceError
from harness.tools import find_nsys

# Variables the captured process may see; everything else is dropped before nsys starts.
ENV_ALLOWLIST = (
    "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "TRITON_CACHE_DIR", "CUPY_CACHE_DIR",
    "XDG_CACHE_HOME", "NVIDIA_VISIBLE_DEVICES",
)


def minimal_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWLIST}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _stringid_references(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(table, column) pairs the export's schema declares as `REFERENCES StringIds(id)`."""
    refs = []
    for table, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table'"):
        for line in (sql or "").splitlines():
            m = re.match(r"\s*(\w+)\s+INTEGER.*REFERENCES StringIds\(id\)", line)
            if m:
                refs.append((table, m.group(1)))
    return refs


def scrub_export(sqlite_path: Path) -> int:
    """Remove the captured processes' environment from an export, then vacuum the file so no
    deleted page keeps it. nsys stores it in three places: rows of META_DATA_CAPTURE named *ENV*
    (deleted), the 'DeviceEnvironment' row of TARGET_INFO_SYSTEM_ENV (blanked), and whole
    NUL-separated environment blocks in StringIds that no event references (blanked; ids stay
    valid). Returns the number of rows removed or blanked."""
    conn = sqlite3.connect(sqlite_path)
    try:
        removed = 0
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "META_DATA_CAPTURE" in tables:
            removed += conn.execute("DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENV%'").rowcount
        if "TARGET_INFO_SYSTEM_ENV" in tables:  # 'DeviceEnvironment': the launch environment, ';'-joined
            removed += conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = '' "
                                    "WHERE name LIKE '%Environment%' AND value != ''").rowcount
        if "StringIds" in tables:
            used: set[int] = set()
            for table, column in _stringid_references(conn):
                used.update(r[0] for r in conn.execute(f'SELECT DISTINCT "{column}" FROM "{table}"') if r[0] is not None)
            doomed = [i for i, v in conn.execute("SELECT id, value FROM StringIds")
                      if isinstance(v, str) and ENV_ASSIGNMENT.match(v) and i not in used]
            conn.executemany("UPDATE StringIds SET value = '' WHERE id = ?", [(i,) for i in doomed])
            removed += len(doomed)
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()
    return removed


def _run(argv: list[str], log, what: str, env: dict[str, str] | None = None, timeout: int = 900) -> None:  # type: ignore[no-untyped-def]
    print("$ " + " ".join(argv), file=log, flush=True)
    try:
        proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise EvidenceError(f"{what} did not finish within {timeout} s; see the log.") from None
    if proc.returncode != 0:
        raise EvidenceError(f"{what} failed with exit status {proc.returncode} (command: {argv[0]} ...); see the log.")


def capture(cfg: dict[str, Any], op: str, shape: str, impl: str, rep_out: Path, sqlite_out: Path, log_path: Path) -> dict[str, Any]:
    """Capture (op, shape, impl) into `rep_out` and export it to `sqlite_out`."""
    nsys = find_nsys(cfg["nsys"]["path"])
    rep_out.parent.mkdir(parents=True, exist_ok=True)
    tmp_base = rep_out.with_name(rep_out.name + ".partial")
    tmp_rep = tmp_base.with_name(tmp_base.name + ".nsys-rep")
    tmp_sqlite = tmp_base.with_name(tmp_base.name + ".sqlite")  # where `--export sqlite` writes it
    cfg_path = rep_out.with_name(rep_out.stem + ".config.json")
    cfg_path.write_text(json.dumps(cfg, indent=1))
    for stale in (tmp_rep, tmp_sqlite):
        stale.unlink(missing_ok=True)
    with open(log_path, "a") as log:
        # --export sqlite: the export in the same nsys run, which saves starting nsys again
        _run([nsys, "profile", "--trace", ",".join(cfg["nsys"]["trace"]), *cfg["nsys"]["extra_args"],
              "--force-overwrite", "true", "--export", "sqlite", "--output", str(tmp_base),
              sys.executable, "-m", "harness", "target", "--config", str(cfg_path),
              "--op", op, "--shape", shape, "--impl", impl],
             log, f"nsys profile of {op} {shape} {impl}", env=minimal_env(),
             timeout=int(cfg.get("timeouts", {}).get("capture_s", 900)))
        if not tmp_rep.is_file():
            raise EvidenceError(
                f"nsys profile of {op} {shape} {impl} wrote no report {tmp_rep.name} (a .qdstrm alone means "
                "its importer failed, e.g. libdw.so.1 missing); see the log.")
        if not tmp_sqlite.is_file():  # an nsys whose profile does not export: export apart
            _run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(tmp_sqlite),
                  str(tmp_rep)], log, f"nsys export of {op} {shape} {impl}")
        removed = scrub_export(tmp_sqlite)
        print(f"scrubbed {removed} environment rows from the export", file=log)
    os.replace(tmp_rep, rep_out)
    os.replace(tmp_sqlite, sqlite_out)
    return {"nsys": nsys, "env_rows_removed": removed}
