"""The namespace bundle: made deterministically, scrubbed, verified against its manifest, its exports
and its reports; unsafe or broken archives refused in one sentence. CPU only; the captures are the
real pipeline exports of tests/fixtures/nsys/."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import sqlite3
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from harness import ROOT, config
from harness.evidence import bundle
from harness.io import write_csv
from harness.report import render as report
from harness.report import step as report_step
from harness.tables import derive as tables
from harness.tables import step as tables_step

FIX = Path(__file__).parent / "fixtures" / "nsys"
SHAPE = "4096x768"
IMPLS = ["cuda", "triton", "torch"]
SECRET = "ghp_FAKE_bundle_secret_0123456789abcdef"
NS = "test-bundle"


def make_namespace(root: Path, ns: str = NS, with_ceilings: bool = True, secret: bool = True,
                   failed: str | None = None) -> None:
    """A namespace as the pipeline leaves it: the three real layernorm exports as captures, tables
    and reports made from them by the pipeline's own steps, small synthetic spans, checks, census.
    `failed` names an implementation whose check failed: no export, a 'not measured' record."""
    cfg = config.validate({"namespace": ns, "implementations": IMPLS,
                           "capture": {"warmup": 10, "iterations": 100, "range": "capture"},
                           "operations": {"layernorm": {"default": SHAPE, "sweep": [SHAPE],
                                                        "tolerance": {"atol": 1e-4, "rtol": 1e-4}}}})
    art = root / "artifacts" / ns
    details, checks = [], []
    for i, impl in enumerate(IMPLS):
        cap = art / "capture" / "layernorm" / SHAPE / f"{impl}.sqlite"
        cap.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FIX / f"h200-pipeline-layernorm-{SHAPE}-{impl}.sqlite", cap)
        cap.chmod(0o644)
        cap.with_suffix(".json").write_text(json.dumps({"op": "layernorm", "shape": SHAPE, "impl": impl,
                                                        "nsys_version": "2025.3.1", "env_rows_removed": 0}))
        cap.with_suffix(".nsys-rep").write_bytes(b"raw nsys report, not scrubbable")
        if impl == failed:  # as measure_step.capture leaves an implementation whose check failed
            cap.unlink()
            cap.with_suffix(".nsys-rep").unlink()
            cap.with_suffix(".json").write_text(json.dumps({"op": "layernorm", "shape": SHAPE, "impl": impl,
                                                            "measured": False, "reason": "check failed: planted"}))
        detail = art / "kernel_time" / "layernorm" / SHAPE / f"{impl}.csv"
        tables_step.kernel_time(str(cap.with_suffix(".json")), "capture", 100, "layernorm", SHAPE, impl, str(detail))
        details.append(str(detail))
        check = art / "check" / "layernorm" / SHAPE / f"{impl}.json"
        check.parent.mkdir(parents=True, exist_ok=True)
        check.write_text(json.dumps({"op": "layernorm", "shape": SHAPE, "impl": impl, "passed": impl != failed,
                                     "max_abs_err": 1e-6 * (i + 1), "max_rel_err": 2e-6, "rel_l2_err": 3e-7,
                                     "atol": 1e-4, "rtol": 1e-4, "nonfinite_outputs": 0, "unwritten_outputs": 0,
                                     "elements": 3145728}))
        checks.append(str(check))
    if secret:  # the environment of a captured process, as an unscrubbed export would hold it
        with sqlite3.connect(art / "capture" / "layernorm" / SHAPE / "cuda.sqlite") as conn:
            conn.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE_3', ?)",
                         (f"GITHUB_TOKEN={SECRET}",))
            conn.execute("INSERT INTO StringIds (id, value) VALUES (999999, ?)",
                         (f"OLDPWD=/x\0GITHUB_TOKEN={SECRET}\0HOME=/root",))
            conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'DeviceEnvironment'",
                         (f"LANG=C.UTF-8;GITHUB_TOKEN={SECRET}",))
    span = art / "span" / "layernorm" / f"{SHAPE}.csv"
    write_csv([{"namespace": ns, "op": "layernorm", "shape": SHAPE, "impl": impl, "cache_mode": "hot",
                       "samples": 300, "rounds": 3, "span_mean_us": 20.0 + i, "span_median_us": 19.5 + i,
                       "span_std_us": 0.4, "span_min_us": 18.0 + i, "span_max_us": 25.0 + i}
                      for i, impl in enumerate(IMPLS)], tables.SPAN_COLUMNS, span)
    tdir = art / "tables"
    ceilings = tdir / "ceilings.csv" if with_ceilings else root / "no-ceilings.csv"
    write_csv([{"ceiling": "copy_bandwidth", "value": 3900.5, "unit": "GB/s", "median_ms": 1.0, "min_ms": 0.9,
                       "max_ms": 1.1, "repeats": 20, "method": "copy_ of 2 GiB"},
                      {"ceiling": "fp32_matmul", "value": 51.2, "unit": "TFLOP/s", "median_ms": 20.0, "min_ms": 19.0,
                       "max_ms": 21.0, "repeats": 20, "method": "8192^3 FP32 matmul, TF32 off"}]
                     if with_ceilings else [], tables.CEILING_COLUMNS, ceilings)
    census = tdir / "census.csv"
    counts = ("spill_stores", "spill_loads", "stack_bytes", "static_smem", "dynamic_smem", "ld_global_32",
              "ld_global_64", "ld_global_128", "st_global_32", "st_global_64", "st_global_128", "barriers")
    row = {"namespace": ns, "op": "layernorm", "impl": "cuda", "kernel": "layernorm_fwd_vec4",
           "specialization": "BLOCK=128", "shapes": SHAPE, "block": 128, "registers": 30,
           **{c: 0 for c in counts}, "ld_global_128": 2, "st_global_128": 2, "barriers": 1}
    write_csv([row], list(row), census)
    outputs = {k: str(tdir / f"{k}.csv") for k in ("kernel_time", "kernel_time_detail", "span", "check", "sweep",
                                                    "cross_check", "variants")}
    tables_step.all_tables(cfg, details, [str(span)], checks, str(ceilings), outputs)
    # counters from real H200 ncu exports of the same three implementations (two profiled calls)
    from harness.tables import counters as ctr

    cfg["counters"].update(enabled=True, iterations=2, metrics=config.load(ROOT / "config.yaml")["counters"]["metrics"])
    rows = []
    for impl in IMPLS:
        kernels = ctr.read_raw_csv(ROOT / "tests" / "fixtures" / "ncu" / f"layernorm-{SHAPE}-{impl}.raw.csv")
        rows += ctr.counter_rows(kernels, cfg["counters"]["metrics"], ns, "layernorm", SHAPE, impl)
    outputs["counters"] = str(tdir / "counters.csv")
    write_csv(rows, ctr.columns(cfg["counters"]["metrics"]), outputs["counters"])
    prov = art / "provenance.json"
    prov.write_text(json.dumps({"namespace": ns, "git": {"commit": "abc123def4567890", "dirty": False},
                                "date_utc": "2026-11-29T00:00:00+00:00", "config": cfg,
                                "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-x"}],
                                "commands": ["snakemake --cores 1 report"], "gpu_state_before_captures": [],
                                "versions": {"nsys": "2025.3.1", "torch": "2.11", "triton": "3.6",
                                             "cupy-cuda13x": "14", "python": "3.12"}}, indent=1))
    inputs = {**outputs, "census": str(census), "provenance": str(prov)}
    if with_ceilings:
        inputs["ceilings"] = str(ceilings)
    rep = root / "report" / ns
    report_step.render(cfg, inputs, str(rep / "field_note.md"), str(rep / "issue_comment.md"),
                 [str(rep / "figures" / "layernorm_sweep.svg")])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(repository root of the synthetic namespace, its bundle)."""
    root = tmp_path_factory.mktemp("repo")
    make_namespace(root)
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
    art, cap = f"artifacts/{NS}", f"artifacts/{NS}/capture/layernorm/{SHAPE}"
    for impl in IMPLS:
        assert f"{cap}/{impl}.sqlite" in files and f"{cap}/{impl}.json" in files
        assert f"{cap}/{impl}.nsys-rep" not in files  # raw reports only when asked for
    for want in (f"{art}/provenance.json", f"{art}/tables/kernel_time.csv", f"{art}/tables/ceilings.csv",
                 f"report/{NS}/field_note.md", f"report/{NS}/issue_comment.md", f"report/{NS}/figures/layernorm_sweep.svg"):
        assert want in files
    assert not any("/kernel_time/" in n or "/check/" in n or "/span/" in n for n in names)  # intermediates stay out
    manifest = json.loads(files["MANIFEST.json"])
    assert manifest["format"] == bundle.FORMAT and manifest["namespace"] == NS
    assert [m["path"] for m in manifest["members"]] == names[1:]
    assert manifest["scrubbed_rows"][f"{cap}/cuda.sqlite"] >= 3
    with tarfile.open(out, "r:gz") as tar:
        assert all(m.mtime == bundle.MTIME and m.uid == m.gid == 0 and m.uname == m.gname == "" and m.isreg()
                   for m in tar)
    assert not list(out.parent.glob("*.partial"))
    assert bundle.main([str(out)]) == 0  # verify(out) == []
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
    original = root / "artifacts" / NS / "capture" / "layernorm" / SHAPE / "cuda.sqlite"
    assert SECRET.encode() in original.read_bytes()  # the namespace's own file is left as it was
    stream = gzip.decompress(out.read_bytes())
    assert SECRET.encode() not in stream and b"GITHUB_TOKEN" not in stream and b"OLDPWD=" not in stream
    for name, data in members(out).items():
        assert SECRET.encode() not in data, name
        assert b"GITHUB_TOKEN=" not in data, name


def test_reports_only_when_asked_for(made: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = made
    out = bundle.make_bundle(NS, tmp_path / "with-reports.tar.gz", root=root, include_reports=True)
    files = members(out)
    assert f"artifacts/{NS}/capture/layernorm/{SHAPE}/cuda.nsys-rep" in files
    assert json.loads(files["MANIFEST.json"])["include_reports"] is True
    assert bundle.verify(out) == []


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

    assert bundle.main([str(tampered)]) == 1
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
    problems = bundle.verify(repack(files, tmp_path / "drift.tar.gz", tmp_path / "scratch"))
    assert len(problems) == 2
    assert problems[0].startswith(f"field_note.md line {index + 1} differs in wording from what this checkout renders")
    assert "report/templates/field_note.md.j2 differ from those the bundle was made with" in problems[1]
    assert "not differences of numbers" in problems[1] and "abc123def4567890" in problems[1]


def test_a_config_name_that_is_not_a_plain_name_is_not_used_as_a_path(made: tuple[Path, Path], tmp_path: Path) -> None:
    _, out = made
    files = members(out)
    name = f"artifacts/{NS}/provenance.json"
    prov = json.loads(files[name])
    prov["config"]["implementations"] = ["cuda", "../../../../escape"]
    files[name] = json.dumps(prov).encode()
    work = tmp_path / "work"
    problems = bundle.verify(repack(files, tmp_path / "hostile.tar.gz", tmp_path / "scratch"), workdir=work)
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

    assert bundle.main([str(broken)]) == 1
    problems = capsys.readouterr().out.splitlines()
    assert f"{name} does not match its SHA-256 in MANIFEST.json: it changed after bundling." in problems
    assert (f"tables/kernel_time.csv row (layernorm, {SHAPE}, triton), column kernel_time_us: "
            f"{edited} in the bundle, {value} from the exports.") in problems


def test_missing_and_extra_members_are_named(made: tuple[Path, Path], tmp_path: Path) -> None:
    _, out = made
    files = members(out)
    del files[f"artifacts/{NS}/tables/census.csv"]
    files[f"artifacts/{NS}/tables/extra.csv"] = b"a,b\n1,2\n"
    problems = bundle.verify(retar(files, tmp_path / "b.tar.gz"))
    assert f"artifacts/{NS}/tables/census.csv is listed in MANIFEST.json but missing from the bundle." in problems
    assert f"artifacts/{NS}/tables/extra.csv is in the bundle but not listed in MANIFEST.json." in problems


def test_a_namespace_without_ceilings_verifies(tmp_path: Path) -> None:
    make_namespace(tmp_path / "repo", "old-ns", with_ceilings=False, secret=False)
    assert not (tmp_path / "repo" / "artifacts" / "old-ns" / "tables" / "ceilings.csv").exists()
    out = bundle.make_bundle("old-ns", tmp_path / "old.tar.gz", root=tmp_path / "repo")
    assert bundle.verify(out) == []


def _unsafe(kind: str, tmp: Path, good: Path) -> Path:
    out = tmp / f"{kind}.tar.gz"
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
            info.size = bundle.MAX_TOTAL_BYTES + 1
            tar.addfile(info, io.BytesIO(b"\0" * info.size))
    return out


@pytest.mark.parametrize("kind", ["dotdot", "dotdot-deep", "absolute", "symlink", "hardlink", "device",
                                  "not-gzip", "gzip-not-tar", "truncated", "trailer-cut", "huge"])
def test_unusable_or_unsafe_bundles_are_refused_in_one_sentence(
        kind: str, made: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, good = made
    case = tmp_path / "case"
    case.mkdir()
    if kind == "huge":
        monkeypatch.setattr(bundle, "MAX_TOTAL_BYTES", 100_000)  # the limit, scaled down to a test's size
    path = _unsafe(kind, case, good)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    work = tmp_path / "work"
    with pytest.raises(bundle.BundleError) as err:
        bundle.verify(path, workdir=work)
    sentence = str(err.value)
    assert "\n" not in sentence and sentence.endswith(".") and str(path) in sentence
    monkeypatch.setattr("tempfile.tempdir", str(work))
    assert bundle.main([str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert not list(work.iterdir())  # the temporary folder is gone, nothing was left in it
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if not p.is_relative_to(work))
    assert after == before  # nothing written anywhere else
    assert not (case / "abs-evil").exists() and not (tmp_path / "evil").exists()


def test_a_missing_bundle_and_bad_usage_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bundle.main([str(tmp_path / "nope.tar.gz")]) == 2
    assert bundle.main([]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_make_bundle_refuses_an_incomplete_namespace(tmp_path: Path) -> None:
    with pytest.raises(bundle.BundleError, match="does not exist"):
        bundle.make_bundle("absent", tmp_path / "x.tar.gz", root=tmp_path)
    with pytest.raises(bundle.BundleError, match="not a namespace name"):
        bundle.make_bundle("../x", tmp_path / "x.tar.gz", root=tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("ns", ["h200-layernorm-1", "h200-ops-defaults-1", "h200-validate-1"])
def test_committed_namespaces_differ_only_by_drift_never_by_numbers(ns: str, tmp_path: Path) -> None:
    """The retained namespaces have no captures, and their reports came from older templates (and,
    for h200-layernorm-1, older tables): verify says so, and finds no number that disagrees."""
    if not (ROOT / "report" / ns / "field_note.md").is_file():
        pytest.skip(f"namespace {ns} is not in this checkout")
    out = bundle.make_bundle(ns, tmp_path / f"{ns}.tar.gz")
    problems = bundle.verify(out)
    assert any("holds no capture exports" in p for p in problems)
    assert all("\n" not in p and p.endswith(".") for p in problems)
    assert not any(re.search(r"line \d+: .* in the bundle, .* from the tables", p) for p in problems)
    assert not any("SHA-256" in p for p in problems)


def test_a_namespace_with_a_failed_implementation_verifies(tmp_path: Path) -> None:
    """The implementation whose check failed has no export and no row in the kernel-time tables by
    design; verify re-derives the others and finds nothing missing."""
    make_namespace(tmp_path, secret=False, failed="cuda")
    out = bundle.make_bundle(NS, tmp_path / "b.tar.gz", root=tmp_path)
    assert bundle.verify(out) == []
    kt = pd.read_csv(tmp_path / "artifacts" / NS / "tables" / "kernel_time.csv")
    assert set(kt["impl"]) == {"triton", "torch"}
