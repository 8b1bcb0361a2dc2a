"""Config validation: defaults filled in, and every bad key or value stopped with one sentence naming it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from harness import ROOT, config
from harness.errors import ConfigError


@pytest.fixture()
def raw() -> dict:
    with open(ROOT / "config.yaml") as fh:
        return yaml.safe_load(fh)


def test_shipped_config_is_valid(raw: dict) -> None:
    cfg = config.validate(raw)
    assert cfg["namespace"] == raw["namespace"]
    assert config.shapes(cfg, "layernorm")[0] == raw["operations"]["layernorm"]["default"]


def test_defaults_are_filled_in() -> None:
    cfg = config.validate({"namespace": "x", "operations": {"layernorm": {
        "default": "8x8", "sweep": ["8x8"], "tolerance": {"atol": 1e-4, "rtol": 1e-4}}}})
    assert cfg["capture"] == {"warmup": 10, "rounds": 60, "round_us": 300, "max_calls": 100, "placements": 15}
    assert cfg["verdict"] == {"margin": 0.01}
    assert cfg["span"] == {"samples": 300, "rounds": 3, "warmup": 20, "max_seconds": 0.25, "exclusive": True}
    assert cfg["cross_check"]["max_seconds"] == 0.25
    assert cfg["implementations"] == ["cuda", "triton", "torch"]
    assert cfg["arch"] == "sm_90"
    assert cfg["operations"]["layernorm"]["eps"] == 1e-5


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("bogus",), 1, "'bogus'"),
        (("capture", "rounds"), 0, "capture.rounds"),
        (("capture", "rounds"), "many", "capture.rounds"),
        (("span", "rounds"), -1, "span.rounds"),
        (("span", "exclusive"), "maybe", "span.exclusive"),
        (("implementations",), ["cuda", "cudnn"], "implementations[1]"),
        (("operations", "layernorm", "sweep"), ["4096x768", "0x768"], "operations.layernorm.sweep[1]"),
        (("operations", "layernorm", "default"), "4096*768", "operations.layernorm.default"),
        (("operations", "layernorm", "tolerance", "atol"), 0, "operations.layernorm.tolerance.atol"),
        (("operations", "softmaxx"), {}, "'softmaxx'"),
        (("namespace",), "../escape", "namespace"),
        (("cache_mode",), "lukewarm", "cache_mode"),
        (("nsys", "extra_args"), ["; rm -rf /"], "nsys.extra_args[0]"),
        (("operations", "layernorm", "sweep"), ["-4096x768"], "operations.layernorm.sweep[0]"),
        (("operations", "layernorm", "sweep"), ["4096x7.5"], "operations.layernorm.sweep[0]"),
        (("operations", "layernorm", "default"), "4096", "operations.layernorm.default"),
        (("operations", "layernorm", "default"), 4096, "operations.layernorm.default"),
        (("operations", "matmul", "implementations"), ["cuda", "cublas"], "operations.matmul.implementations[1]"),
        (("capture", "max_calls"), -5, "capture.max_calls"),
        (("capture", "warmup"), 0, "capture.warmup"),
        (("span", "samples"), 0, "span.samples"),
        (("operations", "layernorm", "tolerance", "rtol"), -1e-4, "operations.layernorm.tolerance.rtol"),
        (("operations", "layernorm", "tolerance", "atol"), "tight", "operations.layernorm.tolerance.atol"),
        (("operations", "layernorm", "tolerance"), {"atol": 1e-4}, "operations.layernorm.tolerance"),
        (("timeouts", "measure_s"), 0, "timeouts.measure_s"),
        (("timeouts", "measure_s"), float("nan"), "timeouts.measure_s"),
        (("gpu_lock_timeout_s",), float("inf"), "gpu_lock_timeout_s"),
        (("operations", "layernorm", "eps"), float("nan"), "operations.layernorm.eps"),
        (("operations", "layernorm", "tolerance", "atol"), float("nan"), "operations.layernorm.tolerance.atol"),
        (("cross_check", "rtol"), float("-inf"), "cross_check.rtol"),
        (("gpu_state", "busy_wait_s"), float("nan"), "gpu_state.busy_wait_s"),
        (("seed",), 2**63, "seed"),
        (("namespace",), "templates", "namespace"),
        (("namespace",), "a/b", "namespace"),
        (("counters", "metrics"), {"x": "gpu__time; rm -rf /"}, "counters.metrics.x"),
        (("run_operations",), ["layernorm", "fft"], "'run_operations' names fft"),
        (("variants",), ["layernorm.not_defined"], "variants"),
        (("namespace",), "", "namespace"),
        (("trust", "margin"), 1.5, "trust.margin"),
    ],
)
def test_bad_values_are_named(raw: dict, path: tuple, value: object, named: str) -> None:
    bad = copy.deepcopy(raw)
    node = bad
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    with pytest.raises(ConfigError) as info:
        config.validate(bad)
    message = str(info.value)
    assert named in message
    assert message.endswith(".") and "\n" not in message


def test_absurd_shape_is_refused(raw: dict) -> None:
    bad = copy.deepcopy(raw)
    bad["operations"]["layernorm"]["sweep"] = ["9999999x9999999"]
    with pytest.raises(ConfigError, match="9999999x9999999"):
        config.validate(bad)


def test_missing_file_and_bad_yaml(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no configuration file"):
        config.load(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("namespace: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        config.load(broken)


def test_jobs_cover_every_shape_and_implementation(raw: dict) -> None:
    cfg = config.validate(raw)
    jobs = list(config.jobs(cfg))
    expected = 0
    for op, spec in raw["operations"].items():
        n_shapes = len(dict.fromkeys([spec["default"], *spec["sweep"]]))
        enabled = [v for v in raw.get("variants", []) if v.startswith(f"{op}.")]
        expected += n_shapes * (len(spec.get("implementations") or cfg["implementations"]) + len(enabled))
    assert len(jobs) == expected
    assert len(set(jobs)) == len(jobs)


def test_resolved_config_round_trips_through_json(tmp_path, raw: dict) -> None:
    """The capture target reads the job's resolved config back from JSON; small floats survive."""
    import json

    cfg = config.validate(raw)
    path = tmp_path / "resolved.json"
    path.write_text(json.dumps(cfg))
    assert config.load(path) == cfg


def test_auto_namespace_takes_the_next_in_sequence_and_resumes_an_unfinished_one(tmp_path) -> None:
    cfg = {"namespace": "auto", "namespace_prefix": "h200"}
    assert config.resolve_namespace(cfg, tmp_path) == "h200-1"
    for n in (1, 2, 10):
        (tmp_path / "artifacts" / f"h200-{n}").mkdir(parents=True)
        (tmp_path / "report" / f"h200-{n}").mkdir(parents=True)
        (tmp_path / "report" / f"h200-{n}" / "field_note.md").write_text("done")
    (tmp_path / "artifacts" / "h200-x").mkdir()
    (tmp_path / "artifacts" / "other-99").mkdir()
    assert config.resolve_namespace(cfg, tmp_path) == "h200-11"
    (tmp_path / "artifacts" / "h200-11").mkdir()  # started, interrupted before its report
    assert config.resolve_namespace(cfg, tmp_path) == "h200-11"
    assert config.resolve_namespace({"namespace": "mine", "namespace_prefix": "h200"}, tmp_path) == "mine"


def test_a_shape_too_large_for_the_gpu_memory_is_refused_before_any_gpu_work(raw: dict) -> None:
    from harness.gpu import preflight

    cfg = config.validate(raw)
    assert preflight.too_large(cfg, 141 * 2**30) == []  # every shipped shape fits an H200
    small = preflight.too_large(cfg, 2 * 2**30)  # a 2 GiB GPU
    assert small and all(m.startswith("config: shape ") and m.endswith("pick a smaller shape.") for m in small)
    # 16384x4096 moves 4 x 268 MB per call in FP32 and float64 copies: 2.0 GiB, over 90% of 2 GiB
    assert any("'16384x4096' of operation 'layernorm'" in m for m in small)
    assert not any("'4096x768'" in m for m in small)


def test_trust_earlier_must_name_a_retained_namespace(tmp_path) -> None:
    from harness.errors import ConfigError
    from harness.tables.trust import check_earlier

    (tmp_path / "old" / "tables").mkdir(parents=True)
    (tmp_path / "old" / "tables" / "kernel_time.csv").write_text("op\n")
    check_earlier(tmp_path, "new", "old")
    check_earlier(tmp_path, "new", None)
    with pytest.raises(ConfigError, match=r"trust.earlier names 'gone', .* \(retained: old\)\."):
        check_earlier(tmp_path, "new", "gone")
    with pytest.raises(ConfigError, match="other than this one"):
        check_earlier(tmp_path, "old", "old")


def test_an_operation_without_a_folder_is_one_sentence() -> None:
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["operations"]["fft"] = dict(raw["operations"]["softmax"])
    with pytest.raises(ConfigError, match=r"^config: unknown operation 'fft' under 'operations'; known operations \(folders of harness/ops/\) are .*layernorm.*\.$"):
        config.validate(raw)


def test_an_operations_own_keys_come_from_its_folder() -> None:
    """layernorm declares eps (PARAMS): accepted there with its default, refused elsewhere."""
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    del raw["operations"]["layernorm"]["eps"]
    assert config.validate(raw)["operations"]["layernorm"]["eps"] == 1.0e-5
    raw["operations"]["softmax"]["eps"] = 1.0e-5
    with pytest.raises(ConfigError, match="unknown key 'eps' under 'operations.softmax'"):
        config.validate(raw)


def test_nested_overrides_arrive_as_text_and_are_read_as_numbers(raw: dict) -> None:
    """snakemake --config 'capture={rounds: 20}' hands the nested values over as text."""
    bad = copy.deepcopy(raw)
    bad["capture"] = {"rounds": "20", "round_us": "150.5"}
    bad["span"] = {"exclusive": "false"}
    cfg = config.validate(bad)
    assert cfg["capture"]["rounds"] == 20 and cfg["capture"]["round_us"] == 150.5 and cfg["span"]["exclusive"] is False
    assert cfg["capture"]["warmup"] == 10  # the keys not given keep their defaults


def test_a_config_that_is_not_utf8_or_is_a_folder_is_one_sentence(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"namespace: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"^config: .*bad.yaml is not UTF-8 text"):
        config.load(bad)
    with pytest.raises(ConfigError, match=r"is a folder, not a configuration file\.$"):
        config.load(tmp_path)


# ------------------------------------------------------------------ hostile configs (issue 31)


def alias_bomb(path: Path) -> Path:
    """A 635-byte YAML whose ten levels of aliases under `variants:` expand to 10^11 values."""
    lines = ["a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    for i in range(1, 11):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*{'a' if i == 1 else f'l{i - 1}'}"] * 10) + "]")
    path.write_text("\n".join(lines) + "\nvariants: *l10\n")
    return path


def run_config(*args: str) -> tuple[int, str]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "harness", "config", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    return proc.returncode, proc.stderr


def test_an_alias_bomb_is_one_sentence_not_a_hang(tmp_path: Path) -> None:
    """It hung `python -m harness config` and `snakemake -n` (the finite-number walk expanded every alias)."""
    bomb = alias_bomb(tmp_path / "bomb.yaml")
    assert bomb.stat().st_size < 700
    rc, err = run_config(str(ROOT / "config.yaml"), str(bomb))
    assert rc == 2 and err.count("\n") == 1 and f"holds more than {config.MAX_CONFIG_VALUES} values" in err, err
    with pytest.raises(ConfigError, match="once its YAML aliases are expanded"):
        config.validate(yaml.safe_load(bomb.read_text()))  # as snakemake hands it over, already loaded


def test_a_config_nested_ten_thousand_deep_is_one_sentence(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("x: " + "[" * 10000 + "]" * 10000 + "\n")
    rc, err = run_config(str(deep))
    assert rc == 2 and err == f"config: {deep} nests mappings or lists more than {config.MAX_CONFIG_DEPTH} levels deep.\n"
    nested: list = []
    for _ in range(100):
        nested = [nested]
    with pytest.raises(ConfigError, match="more than 32 levels deep"):
        config.validate({"x": nested})


def test_a_config_larger_than_the_limit_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with open(big, "w") as fh:
        fh.write("namespace: x\n# " + "a" * (config.MAX_CONFIG_BYTES + 10) + "\n")
    rc, err = run_config(str(big))
    assert rc == 2 and err == (f"config: {big} is larger than {config.MAX_CONFIG_BYTES} bytes, which no configuration "
                               "is; it is refused unread.\n")


def test_the_run_refuses_a_configfile_larger_than_the_limit_as_the_validator_does(tmp_path: Path) -> None:
    """A --configfile over the limit that Snakemake itself reads (its keys valid, a long comment)
    was taken by the run and refused by `python -m harness config`: both refuse it now."""
    import subprocess
    import sys

    big = tmp_path / "big.yaml"
    big.write_text("seed: 7\n# " + "a" * (config.MAX_CONFIG_BYTES + 10) + "\n")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "report", "--configfile", str(big)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"config: {big} is larger than {config.MAX_CONFIG_BYTES} bytes" in proc.stderr


def test_the_validator_refuses_what_the_run_refuses(tmp_path: Path) -> None:
    """`python -m harness config` accepted `trust.earlier: nosuch`, which the run refuses."""
    override = tmp_path / "earlier.yaml"
    override.write_text("trust: {earlier: nosuch}\n")
    rc, err = run_config(str(ROOT / "config.yaml"), str(override))
    assert rc == 2 and err.startswith("config: trust.earlier names 'nosuch', which is not a retained namespace") and \
        err.count("\n") == 1


def test_a_shape_yaml_reads_as_hexadecimal_names_what_was_written(raw: dict) -> None:
    """`default: 0x768` was refused with a sentence naming 1896, a number the user never wrote."""
    raw["operations"]["layernorm"]["default"] = yaml.safe_load("v: 0x768")["v"]
    with pytest.raises(ConfigError) as err:
        config.validate(raw)
    assert "0x768" in str(err.value) and "'operations.layernorm.default'" in str(err.value)


def test_a_file_name_with_control_characters_is_escaped(tmp_path: Path) -> None:
    """A crafted name retitled the terminal: `config` printed it raw."""
    name = tmp_path / "\x1b]0;owned\x07.yaml"
    rc, err = run_config(str(name))
    assert rc == 2 and "\x1b" not in err and "\x07" not in err and "\\x1b]0;owned\\x07.yaml" in err
