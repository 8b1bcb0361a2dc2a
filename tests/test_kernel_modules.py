"""The compiled modules the build leaves for the run (harness.launch.modules), on the CPU with a real
NVRTC build of a layer-norm kernel: the build's offline compile stores its cubin under the key the
run computes for the same source, options and name expression (so a group process loads that
cubin instead of compiling again); another define, architecture or NVRTC version is another key;
`off` stores nothing; and an entry that is not whole is not loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.build import toolchain
from harness.launch import cuda, modules

pytestmark = pytest.mark.skipif(toolchain.load_nvrtc() is None, reason="no NVRTC here to build with")

SOURCE, KERNEL = "layernorm/layernorm.cu", "layernorm_fwd_vec4<128, 2, 1>"


def nvrtc_version() -> str:
    nvrtc = toolchain.load_nvrtc()
    assert nvrtc is not None
    major, minor = nvrtc.version()
    return f"{major}.{minor}"


def test_the_build_leaves_the_cubin_the_run_looks_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(modules.ENV, str(tmp_path / "cache"))
    build = toolchain.compile_offline(SOURCE, [KERNEL], arch="sm_90", compiler="nvrtc")
    key = cuda.built_module_key(SOURCE, cuda.RUNTIME_OPTIONS, KERNEL, "sm_90", nvrtc_version())
    found = modules.load(key)
    assert found is not None
    cubin, lowered = found
    assert cubin.read_bytes() == build.cubin and lowered == build.lowered[KERNEL]
    # what the run would look up for another compile is not there
    for other in (cuda.built_module_key(SOURCE, (*cuda.RUNTIME_OPTIONS, "-DLN_BLOCK=512"), KERNEL, "sm_90",
                                        nvrtc_version()),
                  cuda.built_module_key(SOURCE, cuda.RUNTIME_OPTIONS, KERNEL, "sm_80", nvrtc_version()),
                  cuda.built_module_key(SOURCE, cuda.RUNTIME_OPTIONS, KERNEL, "sm_90", "0.0"),
                  cuda.built_module_key(SOURCE, cuda.RUNTIME_OPTIONS, "layernorm_fwd<128>", "sm_90", nvrtc_version())):
        assert other != key and modules.load(other) is None
    # a variant's build stores under the variant's key
    toolchain.compile_offline(SOURCE, [KERNEL], arch="sm_90", compiler="nvrtc",
                              options=(*cuda.RUNTIME_OPTIONS, "-DLN_BLOCK=512"))
    assert modules.load(cuda.built_module_key(SOURCE, (*cuda.RUNTIME_OPTIONS, "-DLN_BLOCK=512"), KERNEL, "sm_90",
                                              nvrtc_version())) is not None


def test_off_stores_nothing_and_an_entry_that_is_not_whole_is_not_loaded(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(modules.ENV, "off")
    key = modules.key("source", ("-arch=sm_90",), "k", "13.0", "sm_90")
    modules.store(key, b"cubin", "_Z1kv")
    assert modules.cache_root() is None and modules.load(key) is None
    monkeypatch.setenv(modules.ENV, str(tmp_path))
    modules.store(key, b"cubin", "_Z1kv")
    assert modules.load(key) == (tmp_path / "modules" / key[:2] / key / "module.cubin", "_Z1kv")
    entry = tmp_path / "modules" / key[:2] / key
    (entry / "module.cubin").unlink()
    assert modules.load(key) is None
    (entry / "lowered.json").write_text(json.dumps({"lowered": ""}))
    (entry / "module.cubin").write_bytes(b"cubin")
    assert modules.load(key) is None
    assert not [p for p in entry.parent.iterdir() if ".partial-" in p.name]
