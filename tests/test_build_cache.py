"""The build cache (harness.build.cache) on the CPU, with real NVRTC builds of a layer-norm
kernel: a second build with nothing changed comes from the cache with the same rows and files; a
changed kernel source, define or shape is built again; an entry that is not whole is rebuilt; `off`
builds every time; and the census table says which rows came from the cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import repo_copy

from harness import ROOT
from harness.build import cache, toolchain
from harness.build.build import build_census

pytestmark = pytest.mark.skipif(toolchain.load_nvrtc() is None, reason="no NVRTC here to build with")

SHAPES = [(4096, 768)]


def build_in(outdir: Path, base: Path = ROOT, shapes: list[tuple[int, int]] = SHAPES,
             variant: tuple[str, tuple[str, ...]] | None = None) -> tuple[list[dict], bool, str]:
    calls: list[int] = []

    def build() -> list[dict]:
        calls.append(1)
        return build_census("layernorm", "cuda", shapes, outdir=outdir, variant=variant)

    key = cache.key("layernorm", "cuda", shapes, "sm_90", variant=variant, base=base)
    rows, hit = cache.built(key, outdir, build)
    assert hit == (not calls)
    return rows, hit, key


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_unchanged_build_comes_from_the_cache_with_the_same_rows_and_files(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    rows, hit, key = build_in(tmp_path / "one")
    assert not hit and rows
    again, hit, key2 = build_in(tmp_path / "two")
    assert hit and key2 == key and again == rows
    assert files(tmp_path / "two") == files(tmp_path / "one") and files(tmp_path / "one")
    other, hit, key3 = build_in(tmp_path / "three", shapes=[(4096, 1024)])
    assert not hit and key3 != key
    variant, hit, key4 = build_in(tmp_path / "four", variant=("cuda.block512", ("-DLN_BLOCK=512",)))
    assert not hit and key4 not in (key, key3)


def test_a_changed_kernel_source_is_another_key(tmp_path: Path) -> None:
    copy = repo_copy.copy_repo(tmp_path / "repo")
    before = cache.key("layernorm", "cuda", SHAPES, "sm_90", base=copy)
    source = copy / "kernels" / "layernorm" / "layernorm.cu"
    source.write_text(source.read_text() + "\n// one more line\n")
    assert cache.key("layernorm", "cuda", SHAPES, "sm_90", base=copy) != before
    host = copy / "harness" / "launch" / "cuda.py"
    after_source = cache.key("layernorm", "cuda", SHAPES, "sm_90", base=copy)
    host.write_text(host.read_text() + "\n# one more line\n")
    assert cache.key("layernorm", "cuda", SHAPES, "sm_90", base=copy) != after_source


def test_an_entry_that_is_not_whole_is_built_again_and_off_builds_every_time(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    _, _, key = build_in(tmp_path / "one")
    entry = tmp_path / "cache" / key[:2] / key
    (entry / "rows.json").unlink()
    rows, hit, _ = build_in(tmp_path / "two")
    assert not hit and json.loads((entry / "rows.json").read_text()) == rows
    assert not [p for p in entry.parent.iterdir() if ".partial-" in p.name]
    monkeypatch.setenv(cache.ENV, "off")
    shutil.rmtree(tmp_path / "cache")
    _, hit, _ = build_in(tmp_path / "three")
    assert not hit and not (tmp_path / "cache").exists()


def test_the_census_table_says_which_builds_came_from_the_cache(tmp_path: Path) -> None:
    """Two namespaces of the same kernels, one after the other: the second's census rows of ours are
    'cache <key>', the first's 'built', and the rows are otherwise the same."""
    copy = repo_copy.copy_repo(tmp_path / "repo")
    env = repo_copy.env(copy, EVIDENCE_BUILD_CACHE=str(tmp_path / "cache"))
    tables = []
    for ns in ("first", "second"):
        proc = repo_copy.snakemake(copy, env, "--cores", "1", f"artifacts/{ns}/tables/census.csv",
                                   "--config", f"namespace={ns}", "run_operations=[transpose]", "variants=[]")
        assert proc.returncode == 0, proc.stderr[-3000:]
        tables.append(pd.read_csv(copy / "artifacts" / ns / "tables" / "census.csv"))
    first, second = tables
    assert len(first) > 0 and set(first["build"]) == {"built"}
    ours = second["impl"] != "external"  # the external kernel's build (ptxas over its PTX) is not cached
    assert ours.any() and {cell.split()[0] for cell in second.loc[ours, "build"]} == {"cache"}
    assert set(second.loc[~ours, "build"]) == {"built"}
    rest = [c for c in first.columns if c not in ("namespace", "build")]
    pd.testing.assert_frame_equal(first[rest], second[rest])


def test_a_cache_folder_that_cannot_be_written_leaves_the_build_standing(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(cache.ENV, str(blocker / "cache"))
    rows, hit, _ = build_in(tmp_path / "one")
    assert rows and not hit


def test_each_instance_is_cached_whatever_shapes_the_namespace_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A namespace of one shape, then one of that shape and another (the quick run after a full
    one, or the other way): the instance both need comes from the cache, named for the shapes it
    serves now, with the same files; the other instance is built."""
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))

    def key(instance: object) -> str:
        return cache.key("layernorm", "cuda", [], "sm_90", instance=instance)

    one = build_census("layernorm", "cuda", [(4096, 768)], outdir=tmp_path / "one", cache_key=key)
    assert [r["build"] for r in one] == ["built"] * len(one) and one
    two = build_census("layernorm", "cuda", [(4096, 768), (4096, 4096)], outdir=tmp_path / "two", cache_key=key)
    shared = [r for r in two if r["kernel"] in {o["kernel"] for o in one}]
    assert shared and all(r["build"].startswith("cache ") for r in shared)
    assert any(r["build"] == "built" for r in two if r not in shared)  # 4096x4096 needs another instance
    mine = {r["kernel"]: r for r in one}
    for r in shared:  # the same census, its shapes those it serves in this namespace
        assert {k: v for k, v in r.items() if k not in ("build", "shapes")} == \
            {k: v for k, v in mine[r["kernel"]].items() if k not in ("build", "shapes")}
        assert "4096x768" in r["shapes"]
    for name, data in files(tmp_path / "one").items():
        assert (tmp_path / "two" / name).read_bytes() == data
