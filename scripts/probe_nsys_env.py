"""Where the invoking environment's values in a raw Nsight Systems report come from (issue 31).

Run on a GPU machine, from the repository root, with a marker in the shell's environment:
    PROBE_SHELL=shell_$RANDOM$RANDOM python3 scripts/probe_nsys_env.py [--out DIR]
The script also sets PROBE_SETENV in its own os.environ (children see it, /proc/<pid>/environ does
not), then captures a tiny CUDA program under nsys in several ways and prints, for each, which
markers and which of the invoking environment's values (capture.outside_values) each file holds,
with the bytes around the first hit. Variants:
  current  - the pipeline's way: /bin/sh (clean env, new session) -> nsys (clean env)
  direct   - nsys started directly (clean env), no shell between
  orphan   - nsys under a shell whose parent exited, so it is reparented (to init or a subreaper)
  reexec   - the process that starts nsys was itself started under `env -i` (clean initial environ)
  orphan-delay - as orphan, nsys started a second after its shell's parent exited
  ns-*     - nsys in a process namespace of its own (unshare; ns-nomount without its own /proc)
  pipeline - harness.tools.clean_parent as it is now (the namespace where the machine allows one)
Found on the H200 (2026-12-02): current, direct, orphan, orphan-delay and reexec all hold
PROBE_SHELL, never PROBE_SETENV: nsys records the environment of every process above it, as
/proc/<pid>/environ shows it (the orphan is adopted by the nearest subreaper, here a `timeout`
that holds the marker). ns-root, ns-user and ns-user-root hold nothing; ns-nomount writes no
report. The pipeline takes the first namespace form the machine allows (harness.tools.isolation).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.measure import capture  # noqa: E402
from harness.tools import clean_parent, find_nsys  # noqa: E402

NAMESPACES = {
    "ns-root": ["--pid", "--fork", "--mount-proc", "--kill-child"],
    "ns-user": ["--user", "--map-current-user", "--pid", "--fork", "--mount-proc", "--kill-child"],
    "ns-user-root": ["--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child"],
    "ns-nomount": ["--pid", "--fork", "--kill-child"],
}
TARGET = "import cupy; x = cupy.arange(1 << 20, dtype=cupy.float32); (x * 2).sum().get()"


def ancestry(pid: int) -> list[str]:
    chain = []
    while pid > 0:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            break
        ppid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        marks = [m for m in ("PROBE_SHELL", "PROBE_SETENV") if m.encode() + b"=" in environ]
        chain.append(f"{pid} {comm} env vars={environ.count(b'=')} markers={marks}")
        pid = ppid
    return chain


def argv_for(nsys: str, base: Path) -> list[str]:
    return [nsys, "profile", "--trace", "cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite", "true",
            "--export", "sqlite", "--output", str(base), sys.executable, "-c",
            "import os, pathlib; print('target ancestry'); " + TARGET]


def run_variant(name: str, nsys: str, folder: Path, values: dict[str, str]) -> None:
    base = folder / name
    private = Path(tempfile.mkdtemp(prefix=f"probe-{name}-"))
    env = capture.private_env(private)
    argv = argv_for(nsys, base)
    log = open(folder / f"{name}.log", "w")
    t0 = time.time()
    if name == "current":
        subprocess.run(clean_parent(argv), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    elif name == "direct":
        subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    elif name == "orphan":
        rc = folder / f"{name}.rc"
        subprocess.run(["/bin/sh", "-c", '( "$@"; echo $? > "$RC" ) </dev/null >>"$LOG" 2>&1 &', "sh", *argv],
                       env={**env, "RC": str(rc), "LOG": str(folder / f"{name}.log")}, start_new_session=True)
        while not rc.exists() and time.time() - t0 < 120:
            time.sleep(0.2)
    elif name in NAMESPACES:
        prefix = ["unshare", *NAMESPACES[name]]
        ok = subprocess.run([*prefix, "/bin/true"], capture_output=True, text=True)
        print(f"  {' '.join(prefix)} /bin/true: exit {ok.returncode} {ok.stderr.strip()[:200]}")
        subprocess.run([*prefix, "/bin/sh", "-c", '"$@" & wait $!', "sh", *argv], env=env, stdout=log,
                       stderr=subprocess.STDOUT, start_new_session=True)
    elif name == "orphan-delay":
        rc = folder / f"{name}.rc"
        subprocess.run(["/bin/sh", "-c", '( sleep 1; echo "parent now $PPID" >>"$LOG"; "$@"; echo $? > "$RC" ) '
                        '</dev/null >>"$LOG" 2>&1 &', "sh", *argv],
                       env={**env, "RC": str(rc), "LOG": str(folder / f"{name}.log")}, start_new_session=True)
        while not rc.exists() and time.time() - t0 < 120:
            time.sleep(0.2)
        print("  " + (folder / f"{name}.log").read_text().splitlines()[0])
    elif name == "pipeline":  # whatever harness.tools.clean_parent does now
        from harness.tools import isolation_note
        print(f"  {isolation_note()}")
        subprocess.run(clean_parent(argv), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    elif name == "reexec":
        inner = ("import subprocess, sys, json; from harness.tools import clean_parent; "
                 "subprocess.run(clean_parent(json.loads(sys.argv[1])), start_new_session=True)")
        import json
        subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-c", inner,
                        json.dumps(argv)], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    print(f"== {name}: {time.time() - t0:.1f} s")
    for path in sorted(folder.glob(name + ".*")):
        if path.suffix in (".log", ".rc"):
            continue
        data = path.read_bytes()
        hits = [k for k, v in values.items() if v.encode() in data or v.encode("utf-16-le") in data]
        print(f"  {path.name} ({len(data)} bytes): holds {hits or 'nothing'}")
        for marker in ("PROBE_SHELL", "CONTAINER_NAME", "NCCL_VERSION"):
            if marker in hits:
                i = data.find(values[marker].encode())
                snippet = data[max(0, i - 300):i + 120]
                print(f"    around {marker}: {snippet.decode('latin-1')!r}")
        if path.suffix == ".sqlite":
            sqlite_hits(path, values)


def sqlite_hits(path: Path, values: dict[str, str]) -> None:
    conn = sqlite3.connect(path)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for table in tables:
        columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
        for column in columns:
            for key in ("PROBE_SHELL", "PROBE_SETENV", "CONTAINER_NAME"):
                rows = conn.execute(f'SELECT rowid, substr("{column}", 1, 400) FROM "{table}" '
                                    f'WHERE typeof("{column}")=\'text\' AND instr("{column}", ?) > 0',
                                    (values[key],)).fetchall()
                for rowid, text in rows[:3]:
                    print(f"    sqlite {table}.{column} row {rowid} holds {key}: {text!r}")
    conn.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="probe-nsys-")))
    parser.add_argument("variants", nargs="*", default=["direct", "orphan-delay", *NAMESPACES, "pipeline"])
    args = parser.parse_args()
    if "PROBE_SHELL" not in os.environ:
        print("set PROBE_SHELL in the shell's environment first", file=sys.stderr)
        return 2
    os.environ["PROBE_SETENV"] = "setenv_" + secrets.token_hex(8)
    values = capture.outside_values()
    values["PROBE_SETENV"] = os.environ["PROBE_SETENV"]
    print("searching for", sorted(values))
    print("this process's ancestry:", *ancestry(os.getpid()), sep="\n  ")
    try:
        print("pid 1 environ names:", sorted(e.split(b"=", 1)[0].decode() for e in
                                           Path("/proc/1/environ").read_bytes().split(b"\0") if e))
    except OSError as exc:
        print("pid 1 environ unreadable:", exc)
    args.out.mkdir(parents=True, exist_ok=True)
    nsys = find_nsys(None)
    for name in args.variants:
        run_variant(name, nsys, args.out, values)
    left = subprocess.run(["ps", "-eo", "pid,ppid,comm,args"], capture_output=True, text=True).stdout
    print("nsys processes left:", [line for line in left.splitlines() if "nsys" in line and "ps -eo" not in line])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
