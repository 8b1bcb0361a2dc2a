"""The namespace bundle: made deterministically, scrubbed, verified against its manifest, its exports
and its reports; unsafe or broken archives refused in one sentence. CPU only; the namespace is the
one the main command leaves with the stand-in device (the session's `pipeline` fixture)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import signal
import stat
import sqlite3
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest
import repo_copy

from harness import ROOT, config, namespaces
from harness.evidence import bundle
from harness.evidence import verify as verifier
from harness.report import render as report
from harness.report.render import output_paths, render_namespace, table_inputs
from harness.tables import derive
from harness.tables import step as tables_step

SHAPE = "4096x768"
IMPLS = ["cuda", "triton", "torch", "cuda.block512"]
SECRET = "ghp_FAKE_bundle_secret_0123456789abcdef"
NS = repo_copy.PIPELINE_NS
GROUP = f"artifacts/{NS}/measure/layernorm/{SHAPE}"


def plant_secret(export: Path) -> None:
    """The environment of a captured process, as an unscrubbed nsys export holds it."""
    with sqlite3.connect(export) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)")
        conn.execute("CREATE TABLE IF NOT EXISTS TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT)")
        conn.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE_3', ?)",
                     (f"GITHUB_TOKEN={SECRET}",))
        conn.execute("INSERT INTO StringIds (id, value) VALUES (999999, ?)", (f"OLDPWD=/x\0GITHUB_TOKEN={SECRET}\0HOME=/root",))
        conn.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('DeviceEnvironment', ?)", (f"LANG=C.UTF-8;GITHUB_TOKEN={SECRET}",))


def make_namespace(pipeline: tuple[Path, dict, object], root: Path, secret: bool = True,
                   with_ceilings: bool = True) -> Path:
    """The namespace the CPU run of the main command left (tests/repo_copy.py: layernorm at two
    shapes, a variant, a variant whose check failed), copied into `root`; with `secret`, the
    environment of the captured process planted into each export; without ceilings, as a namespace
    from before them: the table removed and the reports rendered again."""
    copy = pipeline[0]
    for part in (f"artifacts/{NS}", f"report/{NS}"):
        shutil.copytree(copy / part, root / part, ignore=shutil.ignore_patterns("logs", "benchmarks", "build"))
    if secret:
        for export in (root / "artifacts" / NS / "measure").glob("*/*/capture.sqlite"):
            plant_secret(export)
    for group in (root / "artifacts" / NS / "measure").glob("*/*"):
        (group / "capture.nsys-rep").write_bytes(b"raw nsys report, not scrubbable")
    if not with_ceilings:
        tdir = root / "artifacts" / NS / "tables"
        (tdir / "ceilings.csv").unlink()
        cfg = config.validate(json.loads((root / "artifacts" / NS / "provenance.json").read_text())["config"])
        tables_step.namespace_tables([str(p) for p in sorted((root / "artifacts" / NS / "measure").glob("*/*/record.json"))],
                                     None, {name: str(tdir / f"{name}.csv") for name in derive.TABLES}, namespace=NS,
                                     cache_mode=cfg["cache_mode"], descriptions=config.variant_descriptions(cfg),
                                     cross_check=cfg["cross_check"], margin=cfg["verdict"]["margin"])
        render_namespace(cfg, table_inputs(root / "artifacts" / NS),
                         output_paths(NS, list(cfg["operations"]), root / "artifacts", root / "report"))
    return root


@pytest.fixture(scope="module")
def made(pipeline, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """(repository root of the namespace, its bundle)."""
    root = make_namespace(pipeline, tmp_path_factory.mktemp("repo"))
    out = bundle.make_bundle(NS, root / "out" / f"{NS}.tar.gz", root=root)
    return root, out


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:  # a bundle these tests made: trusted
        return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]


def retar(files: dict[str, bytes], out: Path) -> Path:
    """An archive of exactly these members, the manifest as given (not recomputed)."""
    with tarfile.open(out, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def repack(files: dict[str, bytes], out: Path, scratch: Path) -> Path:
    """A bundle of these members with a manifest made for them (as make_bundle makes it)."""
    manifest = json.loads(files["MANIFEST.json"])
    meta = {k: v for k, v in manifest.items() if k not in ("format", "members")}
    paths = {}
    for name, data in files.items():
        if name != "MANIFEST.json":
            (scratch / name).parent.mkdir(parents=True, exist_ok=True)
            (scratch / name).write_bytes(data)
            paths[name] = scratch / name
    return bundle.pack(paths, out, meta)


def test_bundle_holds_the_namespace_and_verifies(made: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    root, out = made
    files = members(out)
    names = list(files)
    assert names[0] == "MANIFEST.json" and names[1:] == sorted(names[1:])
    art = f"artifacts/{NS}"
    for name in ("capture.sqlite", "record.json", "launches.csv", "spans.csv", "graph.csv"):
        assert f"{GROUP}/{name}" in files
    assert f"{GROUP}/capture.nsys-rep" not in files  # raw reports only when asked for
    for want in (f"{art}/provenance.json", f"{art}/summary.json", f"{art}/tables/kernel_time.csv",
                 f"{art}/tables/rounds.csv.gz", f"{art}/tables/ceilings.csv", f"report/{NS}/field_note.md",
                 f"report/{NS}/issue_comment.md", f"report/{NS}/index.html", f"report/{NS}/figures/layernorm_sweep.svg",
                 f"report/{NS}/figures/overview.svg"):
        assert want in files
    assert not any("/logs/" in n or "/build/" in n or "/benchmarks/" in n for n in names)  # intermediates stay out
    manifest = json.loads(files["MANIFEST.json"])
    assert manifest["format"] == bundle.FORMAT and manifest["namespace"] == NS and manifest["exports"] is True
    assert [m["path"] for m in manifest["members"]] == names[1:]
    assert manifest["scrubbed_rows"][f"{GROUP}/capture.sqlite"] >= 3
    with tarfile.open(out, "r:gz") as tar:
        assert all(m.mtime == bundle.MTIME and m.uid == m.gid == 0 and m.uname == m.gname == "" and m.isreg()
                   for m in tar)
    assert not list(out.parent.glob("*.partial"))
    assert verifier.main([str(out)]) == 0  # verify(out) == []
    assert capsys.readouterr().out == f"{out}: verified.\n"


def test_the_same_inputs_give_the_same_bytes(made: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = made
    # the checkout's state is an input too (MANIFEST.json's bundled_at): held still here
    monkeypatch.setattr("harness.report.provenance.git_state", lambda: {"commit": "0" * 40, "dirty": False})
    one = bundle.make_bundle(NS, root / "out" / "one.tar.gz", root=root)
    two = bundle.make_bundle(NS, root / "out" / "two.tar.gz", root=root)
    assert one.read_bytes() == two.read_bytes()


def test_no_environment_of_the_captured_process_reaches_the_bundle(made: tuple[Path, Path]) -> None:
    root, out = made
    original = root / GROUP / "capture.sqlite"
    assert SECRET.encode() in original.read_bytes()  # the namespace's own file is left as it was
    stream = gzip.decompress(out.read_bytes())
    assert SECRET.encode() not in stream and b"GITHUB_TOKEN=" not in stream and b"OLDPWD=" not in stream
    for name, data in members(out).items():
        assert SECRET.encode() not in data, name
        assert b"GITHUB_TOKEN=" not in data, name


def test_reports_only_when_asked_for(made: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = made
    out = bundle.make_bundle(NS, tmp_path / "with-reports.tar.gz", root=root, include_reports=True)
    files = members(out)
    assert f"{GROUP}/capture.nsys-rep" in files
    assert json.loads(files["MANIFEST.json"])["include_reports"] is True
    assert verifier.verify(out) == []


def test_an_edited_figure_in_the_field_note_is_named(made: tuple[Path, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _, out = made
    files = members(out)
    kt = pd.read_csv(io.BytesIO(files[f"artifacts/{NS}/tables/kernel_time.csv"]))
    true = report.num(kt.loc[kt["impl"] == "cuda", "kernel_time_us"].iloc[0])  # as the field note prints it
    fake = report.num(float(true) + 0.1)
    note = f"report/{NS}/field_note.md"
    lines = files[note].decode().split("\n")
    pattern = re.compile(rf"(?<![\d.,]){re.escape(true)}(?![\d])")
    index = next(i for i, line in enumerate(lines) if pattern.search(line))
    lines[index] = pattern.sub(fake, lines[index], count=1)
    files[note] = "\n".join(lines).encode()
    tampered = repack(files, tmp_path / "tampered.tar.gz", tmp_path / "scratch")

    assert verifier.main([str(tampered)]) == 1
    problems = capsys.readouterr().out.splitlines()  # main prints verify's problems, one a line
    assert problems == [f"field_note.md line {index + 1}: {fake} in the bundle, {true} from the tables."]


def test_other_wording_is_blamed_on_the_templates_not_the_numbers(made: tuple[Path, Path], tmp_path: Path) -> None:
    _, out = made
    files = members(out)
    note = f"report/{NS}/field_note.md"
    lines = files[note].decode().split("\n")
    index = next(i for i, line in enumerate(lines) if line.startswith("#") and not re.search(r"\d", line))
    lines[index] += " (as an older template wrote it)"
    files[note] = "\n".join(lines).encode()
    manifest = json.loads(files["MANIFEST.json"])
    manifest["code_sha256"]["report/templates/field_note.md.j2"] = "0" * 64  # made with another template
    files["MANIFEST.json"] = json.dumps(manifest).encode()
    problems = verifier.verify(repack(files, tmp_path / "drift.tar.gz", tmp_path / "scratch"))
    assert len(problems) == 2
    assert problems[0].startswith(f"field_note.md line {index + 1} differs in wording from what this checkout renders")
    assert "report/templates/field_note.md.j2 differ from those the bundle was made with" in problems[1]
    assert "not differences of numbers" in problems[1]


def test_the_manifest_hashes_every_module_that_derives_tables_or_reports(made: tuple[Path, Path]) -> None:
    """A module added to the tables or report stage is hashed without being listed by hand."""
    _, out = made
    recorded = json.loads(members(out)["MANIFEST.json"])["code_sha256"]
    stages = {p.relative_to(ROOT).as_posix() for d in ("harness/tables", "harness/report") for p in (ROOT / d).glob("*.py")}
    assert stages <= set(recorded) and "harness/tables/retained.py" in stages
    assert {f for f in recorded if f.endswith(".j2")} == {p.relative_to(ROOT).as_posix()
                                                         for p in (ROOT / "report" / "templates").glob("*.j2")}
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in recorded.values())


def test_a_config_name_that_is_not_a_plain_name_is_not_used_as_a_path(made: tuple[Path, Path], tmp_path: Path) -> None:
    _, out = made
    files = members(out)
    name = f"artifacts/{NS}/provenance.json"
    prov = json.loads(files[name])
    prov["config"]["implementations"] = ["cuda", "../../../../escape"]
    files[name] = json.dumps(prov).encode()
    work = tmp_path / "work"
    problems = verifier.verify(repack(files, tmp_path / "hostile.tar.gz", tmp_path / "scratch"), workdir=work)
    assert problems == ["The bundled config names '../../../../escape', which is not a plain name (letters, digits, "
                        "'.', '_', '-'), so nothing is re-derived from it."]
    assert not list(work.iterdir()) and not list(tmp_path.rglob("escape*"))


def test_an_edited_table_byte_fails_the_hash_and_the_rederivation(made: tuple[Path, Path], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _, out = made
    files = members(out)
    name = f"artifacts/{NS}/tables/kernel_time.csv"
    kt = pd.read_csv(io.BytesIO(files[name]), dtype=str)
    value = kt.loc[kt["impl"] == "triton", "kernel_time_us"].iloc[0]
    edited = value[:-1] + ("1" if value[-1] != "1" else "2")  # one byte
    files[name] = files[name].replace(f",{value},".encode(), f",{edited},".encode(), 1)
    broken = retar(files, tmp_path / "broken.tar.gz")  # the old manifest

    assert verifier.main([str(broken)]) == 1
    problems = capsys.readouterr().out.splitlines()
    assert f"{name} does not match its SHA-256 in MANIFEST.json: it changed after bundling." in problems
    assert (f"tables/kernel_time.csv row (layernorm, {SHAPE}, triton), column kernel_time_us: "
            f"{edited} in the bundle, {value} from the exports.") in problems


def test_a_targets_row_the_tables_do_not_give_is_named(made: tuple[Path, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The targets table is judged again from the re-derived tables: a status edited into it (and
    a manifest made for the edit) is named, cell by cell."""
    _, out = made
    files = members(out)
    name = f"artifacts/{NS}/tables/targets.csv"
    table = pd.read_csv(io.BytesIO(files[name]), dtype=str, keep_default_na=False)
    row = table.iloc[0]
    table.loc[0, "status"] = "met" if row["status"] != "met" else "missed"
    files[name] = table.to_csv(index=False).encode()
    scratch = tmp_path / "scratch"
    broken = repack(files, tmp_path / "edited.tar.gz", scratch)

    assert verifier.main([str(broken)]) == 1
    problems = capsys.readouterr().out
    assert (f"tables/targets.csv row ({row['target']}, {row['op']}, {row['shape']}), column status: "
            f"{table.loc[0, 'status']} in the bundle, {row['status']} from the exports.") in problems


def test_missing_and_extra_members_are_named(made: tuple[Path, Path], tmp_path: Path) -> None:
    _, out = made
    files = members(out)
    del files[f"artifacts/{NS}/tables/census.csv"]
    files[f"artifacts/{NS}/tables/extra.csv"] = b"a,b\n1,2\n"
    problems = verifier.verify(retar(files, tmp_path / "b.tar.gz"))
    assert f"artifacts/{NS}/tables/census.csv is listed in MANIFEST.json but missing from the bundle." in problems
    assert f"artifacts/{NS}/tables/extra.csv is in the bundle but not listed in MANIFEST.json." in problems


def test_a_bundle_that_claims_exports_but_lacks_one_names_it(made: tuple[Path, Path], tmp_path: Path) -> None:
    """A manifest made for the members it has (so no hash finding), saying it holds the exports,
    without one group's export: that group cannot be re-derived, and verify says which."""
    _, out = made
    files = members(out)
    del files[f"{GROUP}/capture.sqlite"]
    problems = verifier.verify(repack(files, tmp_path / "b.tar.gz", tmp_path / "scratch"))
    op, shape = GROUP.split("/")[-2:]
    assert (f"The bundle has no export measure/{op}/{shape}/capture.sqlite, so the tables of "
            f"({op}, {shape}) cannot be re-derived.") in problems


def test_a_namespace_without_ceilings_verifies(pipeline, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = make_namespace(pipeline, tmp_path / "repo", secret=False, with_ceilings=False)
    out = bundle.make_bundle(NS, tmp_path / "old.tar.gz", root=root)
    assert verifier.verify(out) == []


def _unsafe(kind: str, tmp: Path, good: Path) -> Path:
    out = tmp / f"{kind}.tar.gz"
    if kind.startswith("sparse"):  # GNU tar's sparse member (both formats): 64 MB of holes in 300 bytes
        src = tmp / f"src-{kind}"
        (src / "report" / NS).mkdir(parents=True)
        (src / "MANIFEST.json").write_bytes(members(good)["MANIFEST.json"])
        with open(src / "report" / NS / "sparse", "wb") as fh:
            fh.truncate(64 << 20)
            fh.seek(0, 2)
            fh.write(b"x")
        fmt = "gnu" if kind == "sparse-gnu" else "posix"
        subprocess.run(["tar", "--sparse", f"--format={fmt}", "-czf", str(out), "-C", str(src), "MANIFEST.json",
                        f"report/{NS}/sparse"], check=True)
        shutil.rmtree(src)
        return out
    if kind == "not-gzip":
        out.write_text("just some text\n")
        return out
    if kind == "gzip-not-tar":
        out.write_bytes(gzip.compress(b"not a tar archive " * 100))
        return out
    if kind == "truncated":
        data = good.read_bytes()
        out.write_bytes(data[: len(data) // 2])
        return out
    if kind == "trailer-cut":
        out.write_bytes(good.read_bytes()[:-4])  # the gzip size field gone: every tar header still reads
        return out
    manifest = members(good)["MANIFEST.json"]
    with tarfile.open(out, "w:gz") as tar:
        info = tarfile.TarInfo("MANIFEST.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        if kind in ("dotdot", "absolute", "dotdot-deep"):
            name = {"dotdot": "../evil", "dotdot-deep": f"report/{NS}/../../../evil",
                    "absolute": str(tmp / "abs-evil")}[kind]
            info = tarfile.TarInfo(name)
            info.size = 4
            tar.addfile(info, io.BytesIO(b"evil"))
        elif kind in ("symlink", "hardlink"):
            info = tarfile.TarInfo(f"report/{NS}/link")
            info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
            info.linkname = str(tmp / "abs-evil") if kind == "symlink" else "MANIFEST.json"
            tar.addfile(info)
        elif kind == "device":
            info = tarfile.TarInfo(f"report/{NS}/dev")
            info.type = tarfile.CHRTYPE
            tar.addfile(info)
        elif kind == "huge":
            info = tarfile.TarInfo(f"report/{NS}/huge")
            info.size = verifier.MAX_TOTAL_BYTES + 1
            tar.addfile(info, io.BytesIO(b"\0" * info.size))
    return out


@pytest.mark.parametrize("kind", ["dotdot", "dotdot-deep", "absolute", "symlink", "hardlink", "device", "sparse-gnu", "sparse-posix",
                                  "not-gzip", "gzip-not-tar", "truncated", "trailer-cut", "huge"])
def test_unusable_or_unsafe_bundles_are_refused_in_one_sentence(
        kind: str, made: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, good = made
    case = tmp_path / "case"
    case.mkdir()
    if kind == "huge":
        monkeypatch.setattr(verifier, "MAX_TOTAL_BYTES", 100_000)  # the limit, scaled down to a test's size
    path = _unsafe(kind, case, good)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    work = tmp_path / "work"
    with pytest.raises(bundle.BundleError) as err:
        verifier.verify(path, workdir=work)
    sentence = str(err.value)
    assert "\n" not in sentence and sentence.endswith(".") and str(path) in sentence
    monkeypatch.setattr("tempfile.tempdir", str(work))
    assert verifier.main([str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert not list(work.iterdir())  # the temporary folder is gone, nothing was left in it
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if not p.is_relative_to(work))
    assert after == before  # nothing written anywhere else
    assert not (case / "abs-evil").exists() and not (tmp_path / "evil").exists()


@pytest.mark.parametrize(("kind", "why"), [("sparse-gnu", "is not a regular file or folder"),
                                         ("sparse-posix", "is a sparse file, which a bundle never holds")])
def test_a_sparse_member_is_named(made: tuple[Path, Path], tmp_path: Path, kind: str, why: str) -> None:
    with pytest.raises(bundle.BundleError, match=f"member report/{NS}/sparse {why}"):
        verifier.verify(_unsafe(kind, tmp_path, made[1]), workdir=tmp_path / "work")


def test_a_killed_verify_leaves_a_folder_the_next_one_removes(tmp_path: Path) -> None:
    old, fresh, other = tmp_path / f"{verifier.PREFIX}old", tmp_path / f"{verifier.PREFIX}fresh", tmp_path / "keep"
    for folder in (old, fresh, other):
        (folder / "bundle").mkdir(parents=True)
    past = time.time() - verifier.STALE_AFTER_S - 60
    os.utime(old, (past, past))
    os.utime(other, (past, past))
    assert verifier.sweep_stale(tmp_path) == [old]
    assert not old.exists() and fresh.is_dir() and other.is_dir()  # a running verify's folder stays


def test_sigterm_ends_verify_and_removes_its_folder(made: tuple[Path, Path], tmp_path: Path) -> None:
    """`kill` (SIGTERM) while verify re-derives: exit 143 and no verify folder left behind."""
    work = tmp_path / "tmp"
    work.mkdir()
    env = {**os.environ, "TMPDIR": str(work)}
    proc = subprocess.Popen([sys.executable, "-m", "harness", "verify", str(made[1])], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while not list(work.glob(f"{verifier.PREFIX}*")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "verify ended before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and b"Traceback" not in err
    assert not list(work.iterdir())


def test_a_missing_bundle_and_bad_usage_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert verifier.main([str(tmp_path / "nope.tar.gz")]) == 2
    assert verifier.main([]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_make_bundle_refuses_an_incomplete_namespace(tmp_path: Path) -> None:
    with pytest.raises(bundle.BundleError, match="does not exist"):
        bundle.make_bundle("absent", tmp_path / "x.tar.gz", root=tmp_path)
    with pytest.raises(bundle.BundleError, match="not a namespace name"):
        bundle.make_bundle("../x", tmp_path / "x.tar.gz", root=tmp_path)
    assert not list(tmp_path.iterdir())


COMMITTED = namespaces.reported(ROOT)


@pytest.mark.parametrize("ns", COMMITTED)
def test_every_committed_namespace_verifies(ns: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each retained namespace, bundled from this checkout, verifies: its tables match the
    manifest and its reports, figures and summary are what this code renders from them (its page
    is not committed, so not bundled: verify compares a page only where a bundle has one). Its
    raw captures never entered git, so verify notes that the tables were not re-derived (and
    nothing else). The command alone: its exit status and lines say all that verify() returns,
    and each verification re-renders the namespace (most of this test's time)."""
    out = bundle.make_bundle(ns, tmp_path / f"{ns}.tar.gz")
    status = verifier.main([str(out)])
    printed = capsys.readouterr()
    assert (status, printed.out) == (0, f"note: {verifier.NO_EXPORTS}\n{out}: verified.\n"), printed.out + printed.err


def test_a_namespace_with_a_failed_implementation_verifies(made: tuple[Path, Path]) -> None:
    """The variant whose check failed has no launches and no row in the kernel-time tables by
    design; verify re-derives the others and finds nothing missing."""
    root, out = made
    assert verifier.verify(out) == []
    kt = pd.read_csv(root / "artifacts" / NS / "tables" / "kernel_time.csv")
    assert "cuda.wrong" not in set(kt["impl"]) and "cuda.block512" in set(kt["impl"])
    check = pd.read_csv(root / "artifacts" / NS / "tables" / "check.csv")
    assert not check.loc[check["impl"] == "cuda.wrong", "passed"].any()


def test_an_out_that_is_a_folder_is_one_sentence(made: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = made
    with pytest.raises(bundle.BundleError) as err:
        bundle.make_bundle(NS, tmp_path, root=root)
    assert str(err.value) == f"{tmp_path} is a folder; --out names the bundle file to write."
    assert not list(tmp_path.parent.glob("*.partial"))


# ------------------------------------------------------------------ issue 31: outside files, values, outputs


def fresh_namespace(pipeline, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    return make_namespace(pipeline, tmp_path / "repo", secret=False)


@pytest.mark.parametrize("where, target", [
    (f"{GROUP}/passwd", "/etc/passwd"),
    (f"{GROUP}/outside.json", "OUTSIDE"),
    (f"artifacts/{NS}/measure/linked", "FOLDER"),
    (f"artifacts/{NS}/logs/x.log", "/etc/hostname"),
])
def test_a_link_anywhere_in_the_namespace_stops_the_bundle(pipeline, tmp_path: Path, where: str,  # type: ignore[no-untyped-def]
                                                           target: str) -> None:
    """A link under measure/ (to /etc/passwd, a JSON outside the repository, a whole folder) was
    followed by bundle and verify said `verified.`: only tables/ and report/ were checked."""
    root = fresh_namespace(pipeline, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.json").write_text('{"secret": 1}\n')
    link = root / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to({"OUTSIDE": outside / "x.json", "FOLDER": outside}.get(target, Path(target)))
    with pytest.raises(bundle.BundleError) as err:
        bundle.make_bundle(NS, tmp_path / "b.tar.gz", root=root)
    assert str(err.value) == f"{where} is a symbolic link; a bundle takes regular files only."
    assert not (tmp_path / "b.tar.gz").exists()


def test_a_hard_link_in_the_namespace_stops_the_bundle(pipeline, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = fresh_namespace(pipeline, tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text('{"secret": 1}\n')
    os.link(outside, root / GROUP / "extra.json")
    with pytest.raises(bundle.BundleError, match=f"^{GROUP}/extra.json is a hard link"):
        bundle.make_bundle(NS, tmp_path / "b.tar.gz", root=root)


def test_values_of_the_environment_are_withheld_wherever_they_are(pipeline, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Secret values planted in a table cell, a report line, a group file and the provenance all
    reached the bundle: scrubbing matched names and prefixes, not values."""
    token = "tok_" + "5" * 12 + "PLANTED" + "x" * 8
    monkeypatch.setenv("SOME_DEPLOY_TOKEN", token)
    root = fresh_namespace(pipeline, tmp_path)
    art, rep = root / "artifacts" / NS, root / "report" / NS
    planted = [art / "tables" / "check.csv", rep / "field_note.md", root / GROUP / "record.json",
               art / "provenance.json"]
    for path in planted:
        text = path.read_text()
        path.write_text(text.replace("layernorm", f"layernorm{token}", 1) if path.suffix == ".csv" else
                        text.replace("\n", f"\n<!-- {token} -->\n", 1) if path.suffix == ".md" else
                        text.replace('{', '{"note": "' + token + '", ', 1))
    (root / GROUP / "capture.nsys-rep").write_bytes(b"raw " + token.encode())
    notes: list[str] = []
    out = bundle.make_bundle(NS, tmp_path / "b.tar.gz", root=root, include_reports=True, notes=notes)
    stream = gzip.decompress(out.read_bytes())
    assert token.encode() not in stream
    got = members(out)
    for path in planted:
        arc = path.relative_to(root).as_posix()
        assert "[SOME_DEPLOY_TOKEN withheld]".encode() in got[arc], arc
    assert f"{GROUP}/capture.nsys-rep" not in got
    manifest = json.loads(got["MANIFEST.json"])
    assert set(manifest["withheld"]) == {p.relative_to(root).as_posix() for p in planted}
    assert manifest["left_out"] == {f"{GROUP}/capture.nsys-rep": ["SOME_DEPLOY_TOKEN"]}
    assert len(notes) == 5 and all(n.endswith(".") and token not in n for n in notes)
    assert f"{GROUP}/capture.nsys-rep is left out of the bundle: it holds the value of SOME_DEPLOY_TOKEN" in " ".join(notes)
    assert token in (art / "tables" / "check.csv").read_text()  # the namespace's own files are left as they were


def test_a_scrub_folder_is_private_and_the_next_bundle_sweeps_a_killed_ones(tmp_path: Path) -> None:
    """After kill -9 during bundle, /tmp/bundle-scrub-* folders stayed, one holding a planted token."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f"{bundle.SCRUB_PREFIX}{int(dead.stdout)}-abc"
    mine = tmp_path / f"{bundle.SCRUB_PREFIX}{os.getpid()}-def"
    old = tmp_path / f"{bundle.SCRUB_PREFIX}old"
    for folder in (gone, mine, old):
        folder.mkdir()
        (folder / "0.sqlite").write_bytes(b"unscrubbed")
    past = time.time() - bundle.STALE_AFTER_S - 60
    os.utime(old, (past, past))
    assert sorted(bundle.sweep_scrub(tmp_path)) == sorted([gone, old])
    assert mine.is_dir()  # a running bundle's folder stays
    copy = bundle._private_copy(mine / "0.sqlite", mine / "1.sqlite")
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600


def test_a_sigkilled_bundle_leaves_nothing_readable_by_others(made: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = made
    work = tmp_path / "tmp"
    work.mkdir()
    env = {**os.environ, "TMPDIR": str(work), "PYTHONPATH": str(ROOT)}
    code = ("import sys; from pathlib import Path; from harness.evidence import bundle; "
            f"bundle.make_bundle({NS!r}, Path({str(tmp_path / 'k.tar.gz')!r}), root=Path({str(root)!r}))")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT)
    deadline = time.time() + 60
    while not list(work.glob(f"{bundle.SCRUB_PREFIX}*/*.sqlite")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    left = list(work.glob(f"{bundle.SCRUB_PREFIX}*"))
    for folder in left:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert all(stat.S_IMODE(f.stat().st_mode) & 0o077 == 0 for f in folder.rglob("*") if f.is_file())
    assert bundle.sweep_scrub(work) == left and not list(work.iterdir())


def test_two_bundles_to_one_out_never_share_a_partial_file(made: tuple[Path, Path], tmp_path: Path) -> None:
    """Two bundle commands to one --out shared '<out>.partial': the one that reported success left a
    corrupt file. Each now writes a partial file of its own, and the last rename wins, whole."""
    root, _ = made
    out = tmp_path / "same.tar.gz"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("from pathlib import Path; from harness.evidence import bundle; "
            f"bundle.make_bundle({NS!r}, Path({str(out)!r}), root=Path({str(root)!r}))")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stderr=subprocess.PIPE) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    assert verifier.verify(out, tmp_path / "v") == [] and not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("target", [f"artifacts/{NS}/tables/kernel_time.csv", f"report/{NS}/field_note.md", "config.yaml"])
def test_an_out_onto_the_evidence_or_the_config_is_refused(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`bundle h200-ops-3 --out artifacts/h200-ops-3/tables/kernel_time.csv` replaced the table with a gzip, exit 0."""
    path = ROOT / target
    before = path.read_bytes() if path.is_file() else None
    assert bundle.bundle_main([NS, "--out", str(path), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"bundle: --out {path} ") and "may replace" in err
    assert (path.read_bytes() if path.is_file() else None) == before


def test_an_existing_out_is_replaced_only_with_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine.tar.gz"
    out.write_text("mine\n")
    assert bundle.bundle_main(["h200-ops-4", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"bundle: {out} already exists; pass --force to replace it.\n"
    assert out.read_text() == "mine\n"


def test_members_that_differ_only_in_case_are_refused(made: tuple[Path, Path], tmp_path: Path) -> None:
    """`FIELD_NOTE.md` beside `field_note.md`, with other claims, verified."""
    files = members(made[1])
    files[f"report/{NS}/FIELD_NOTE.md"] = b"# everything is 10x faster\n"
    bad = repack(files, tmp_path / "case.tar.gz", tmp_path / "scratch")
    with pytest.raises(bundle.BundleError) as err:
        verifier.verify(bad, tmp_path / "v")
    assert f"member report/{NS}/field_note.md differs only in case (or in how its letters are composed) from " \
           f"report/{NS}/FIELD_NOTE.md" in str(err.value)


def test_a_listed_table_nothing_derives_is_named(made: tuple[Path, Path], tmp_path: Path) -> None:
    """An extra table, listed in the manifest with its hash, verified: nothing derives it."""
    files = members(made[1])
    files[f"artifacts/{NS}/tables/extra.csv"] = b"op,claim\nlayernorm,10x faster\n"
    bad = repack(files, tmp_path / "extra.tar.gz", tmp_path / "scratch")
    problems = verifier.verify(bad, tmp_path / "v")
    assert problems == [f"artifacts/{NS}/tables/extra.csv is no file the pipeline writes for the bundled config "
                        "(nothing derives it), so verify cannot account for it."]


def interrupt_when(proc: subprocess.Popen, ready) -> tuple[int, str]:  # type: ignore[no-untyped-def,type-arg]
    deadline = time.time() + 120
    while not ready() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "it ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode()


def test_ctrl_c_ends_verify_and_bundle_in_one_line_without_blaming_the_bundle(made: tuple[Path, Path],
                                                                             tmp_path: Path) -> None:
    """Ctrl-C during verify or bundle printed a KeyboardInterrupt traceback or blamed the bundle."""
    root, out = made
    work = tmp_path / "tmp"
    work.mkdir()
    env = {**os.environ, "TMPDIR": str(work), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "harness", "verify", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    rc, err = interrupt_when(proc, lambda: list(work.glob(f"{verifier.PREFIX}*/bundle/artifacts")))
    assert rc == 130 and err.count("\n") == 1 and "Traceback" not in err and "corrupt" not in err, err
    assert "interrupted (Ctrl-C)" in err and not list(work.iterdir())
    code = ("import sys; from pathlib import Path; from harness.evidence import bundle; from harness.__main__ import main; "
            f"bundle.ROOT = Path({str(root)!r}); bundle.make_bundle.__defaults__ = (Path({str(root)!r}), False, None, None); "
            f"sys.exit(main(['bundle', {NS!r}, '--out', {str(tmp_path / 'i.tar.gz')!r}]))")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    rc, err = interrupt_when(proc, lambda: list(work.glob(f"{bundle.SCRUB_PREFIX}*/*.sqlite")))
    assert rc == 130 and err.count("\n") == 1 and "Traceback" not in err, err
    assert not list(work.iterdir()) and not list(tmp_path.glob("i.tar.gz*"))


def test_a_bundle_name_with_control_characters_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A crafted name retitled the terminal: verify printed it raw."""
    name = tmp_path / "\x1b]0;owned\x07.tar.gz"
    name.write_bytes(b"not gzip")
    assert verifier.main([str(name)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;owned\\x07.tar.gz" in err


def test_the_commit_given_to_a_copy_without_git_stays_in_the_bundle_and_verifies(pipeline, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """On a machine whose copy of the tree has no .git, EVIDENCE_GIT_COMMIT names the commit
    (harness.report.provenance.git_state): the provenance and the reports hold its value by design,
    so the bundle keeps it where they have it, and the bundle verifies (it once withheld it, and
    the reports rendered again from the withheld provenance differed from the bundled ones)."""
    root = make_namespace(pipeline, tmp_path / "repo")
    commit = "d3" * 20
    where = root / "artifacts" / NS / "provenance.json"
    provenance = json.loads(where.read_text())
    provenance["git"] = {"commit": commit, "dirty": None, "source": "EVIDENCE_GIT_COMMIT"}
    where.write_text(json.dumps(provenance, indent=1))
    cfg = config.validate(provenance["config"])
    render_namespace(cfg, table_inputs(root / "artifacts" / NS),
                     output_paths(NS, list(cfg["operations"]), root / "artifacts", root / "report"))
    assert commit in (root / "report" / NS / "field_note.md").read_text()
    environ = {"EVIDENCE_GIT_COMMIT": commit, "EVIDENCE_GIT_DIRTY": "uncommitted", "PATH": "/usr/bin:/bin"}
    notes: list[str] = []
    out = bundle.make_bundle(NS, tmp_path / "out" / f"{NS}.tar.gz", root=root, notes=notes, environ=environ)
    files = members(out)
    assert commit.encode() in files[f"report/{NS}/field_note.md"] and commit.encode() in files[f"artifacts/{NS}/provenance.json"]
    assert not any("withheld" in note for note in notes), notes
    assert verifier.verify(out) == []


def test_the_values_searched_for_are_credentials_not_descriptions() -> None:
    """The environment of the command and any the provenance records; not the host's name (the
    provenance records it by design), plain numbers, short values, or the capture's allowlist."""
    env = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxR", "HOSTNAME": "gpu-node-01.cluster",
           "SOURCE_DATE_EPOCH": "1796160759", "X": "1", "PATH": "/usr/bin:/bin",
           "EVIDENCE_GIT_COMMIT": "ab" * 20, "EVIDENCE_GIT_DIRTY": "uncommitted"}
    provenance = {"capture": {"environment": {"RECORDED_TOKEN": "rec_" + "z" * 20}}}
    assert bundle.secret_values(provenance, env) == {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxR",
                                                     "RECORDED_TOKEN": "rec_" + "z" * 20}
