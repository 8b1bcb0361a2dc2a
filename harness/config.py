"""Load config.yaml and validate it against workflow/schemas/config.schema.yaml.

Validation fills in schema defaults and raises ConfigError with one sentence that names the
offending key, so a bad key or value stops a run before any work starts.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness import ROOT, baseline, ops
from harness.ops import variants
from harness.errors import ConfigError, EvidenceError, shown
from harness.launch.external import validate_external
from harness.namespaces import check_name

SCHEMA_PATH = ROOT / "workflow" / "schemas" / "config.schema.yaml"

# Most bytes one call of an operation may move; more is a typo, not a shape.
MAX_CALL_BYTES = 64 * 2**30

MAX_CONFIG_BYTES = 1 << 20
"""Largest config file read (1 MiB; config.yaml is a few kB): a larger one is refused unread."""
MAX_CONFIG_VALUES = 100_000
"""Most values a config may hold once its YAML aliases are expanded (each use of an anchor counts
its values again): a few aliases nested ten deep expand to billions, which no walk finishes."""
MAX_CONFIG_DEPTH = 32
"""Deepest nesting of mappings and lists a config may have (config.yaml nests five deep)."""


def _schema(operations: Any = None) -> dict[str, Any]:
    """The config schema, with a block of its own for each configured operation: the common keys
    ($defs/operation) and the keys the operation's folder declares in its PARAMS (layernorm's eps).
    An operation with no folder under harness/ops/ is one sentence."""
    with open(SCHEMA_PATH) as fh:
        schema: dict[str, Any] = yaml.safe_load(fh)
    if isinstance(operations, Mapping):
        known = ops.known()
        properties = {}
        for name in operations:
            if name not in known:
                raise ConfigError(f"config: unknown operation {name!r} under 'operations'; known operations "
                                  f"(folders of harness/ops/) are {', '.join(known)}.")
            block = json.loads(json.dumps(schema["$defs"]["operation"]))
            block["properties"].update(ops.get(name).params)
            properties[name] = block
        schema["properties"]["operations"]["properties"] = properties
    return schema


def _with_defaults(validator_class: Any) -> Any:
    """A validator that fills in `default` values while it validates (jsonschema FAQ recipe)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):  # type: ignore[no-untyped-def]
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    default = sub["default"]
                    instance[name] = dict(default) if isinstance(default, dict) else (
                        list(default) if isinstance(default, list) else default)
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _key_path(error: jsonschema.ValidationError) -> str:
    parts: list[str] = []
    for p in error.absolute_path:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def _sentence(error: jsonschema.ValidationError) -> str:
    key = _key_path(error)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        where = "the top level" if key == "(top level)" else f"'{key}'"
        return (f"config: unknown key {', '.join(repr(u) for u in unknown)} under {where}; "
                f"allowed keys are {', '.join(allowed)}.")
    if error.validator == "enum":
        return (f"config: '{key}' is {error.instance!r}, but must be one of "
                f"{', '.join(map(str, error.validator_value))}.")
    if error.validator == "pattern":
        desc = error.schema.get("description")
        hint = f" ({desc})" if desc else ""
        return f"config: '{key}' is {error.instance!r}, which is not a valid value{hint}."
    if error.validator == "required":
        return f"config: {error.message} under '{key}'."
    return f"config: '{key}': {error.message}."


SCALAR_TYPES: dict[str, type | tuple[type, ...]] = {"integer": int, "number": (int, float), "boolean": bool}


def _coerce(instance: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> Any:
    """Scalars given as text where the schema wants a number or a boolean, read as YAML scalars:
    Snakemake hands nested `--config 'capture={rounds: 20}'` values over as text."""
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return _coerce(instance, target, root)
    if isinstance(instance, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, value in instance.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub:
                instance[key] = _coerce(value, sub, root)
        return instance
    if isinstance(instance, list) and isinstance(schema.get("items"), dict):
        return [_coerce(v, schema["items"], root) for v in instance]
    types = schema.get("type")
    wanted = [types] if isinstance(types, str) else list(types or [])
    if isinstance(instance, str) and "string" not in wanted and any(t in SCALAR_TYPES for t in wanted):
        try:
            value = yaml.safe_load(instance)
        except yaml.YAMLError:
            return instance
        if any(isinstance(value, SCALAR_TYPES[t]) and not (t != "boolean" and isinstance(value, bool))
               for t in wanted if t in SCALAR_TYPES):
            return value
    return instance


def _non_finite(value: Any, path: str = "") -> str | None:
    """The key of the first number that is NaN or infinite, else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "(top level)"
    if isinstance(value, dict):
        for key, sub in value.items():
            found = _non_finite(sub, f"{path}.{key}" if path else str(key))
            if found:
                return found
    if isinstance(value, list):
        for i, sub in enumerate(value):
            found = _non_finite(sub, f"{path}[{i}]")
            if found:
                return found
    return None


def check_size(raw: Any, where: str = "the configuration") -> None:
    """ConfigError (one sentence) when `raw` nests deeper than MAX_CONFIG_DEPTH or holds more than
    MAX_CONFIG_VALUES values with its aliases expanded; walked without recursion, and the walk stops
    at the first limit, so neither a YAML alias bomb nor ten thousand nested lists can hang it."""
    stack: list[tuple[Any, int]] = [(raw, 1)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_CONFIG_VALUES:
            raise ConfigError(f"config: {where} holds more than {MAX_CONFIG_VALUES} values once its YAML aliases are "
                              "expanded (each use of an anchor repeats it); write the values out instead.")
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigError(f"config: {where} nests mappings or lists more than {MAX_CONFIG_DEPTH} levels deep.")
        if isinstance(value, Mapping):
            stack.extend((v, depth + 1) for v in value.values())
            count += len(value)  # the keys
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1) for v in value)


def _shape_numbers(cfg: Mapping[str, Any]) -> None:
    """A shape YAML read as a number is one sentence naming what was written: YAML 1.1 reads
    `0x768` as the hexadecimal 1896, so a shape with a first dimension of 0 arrives as an integer."""
    operations = cfg.get("operations")
    if not isinstance(operations, Mapping):
        return
    for op, spec in operations.items():
        if not isinstance(spec, Mapping):
            continue
        sweep = spec.get("sweep")
        places = [("default", spec.get("default"))] + (
            [(f"sweep[{i}]", v) for i, v in enumerate(sweep)] if isinstance(sweep, list) else [])
        for key, value in places:
            if isinstance(value, int) and not isinstance(value, bool):
                written = f"{value:#x}" if value > 0 else str(value)
                raise ConfigError(f"config: 'operations.{op}.{key}' reads as the number {value}, which YAML makes of "
                                  f"{written} (a hexadecimal number), not a shape AxB with positive dimensions; write the "
                                  f"shape as AxB, each dimension at least 1.")


def validate(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a configuration mapping, fill in defaults and return a new dict."""
    check_size(raw)
    _shape_numbers(raw)
    cfg: dict[str, Any] = yaml.safe_load(yaml.safe_dump(dict(raw), sort_keys=False))  # deep copy, plain types, order kept
    schema = _schema(cfg.get("operations"))
    _coerce(cfg, schema, schema)
    bad = _non_finite(cfg)
    if bad:
        raise ConfigError(f"config: '{bad}' is not a finite number (NaN and infinity are refused).")
    validator_class = _with_defaults(jsonschema.Draft202012Validator)
    validator = validator_class(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(list(e.absolute_path)), str(e.message)))
    if errors:
        raise ConfigError(_sentence(jsonschema.exceptions.best_match(errors)))
    if cfg["namespace"] != AUTO_NAMESPACE:
        check_name(cfg["namespace"], "config: 'namespace'")
    check_name(f"{cfg['namespace_prefix']}-1", "config: 'namespace_prefix'")
    if cfg.get("overwrite") is not None:
        check_name(cfg["overwrite"], "config: 'overwrite'")
    _semantic_checks(cfg)
    _target_checks(cfg)
    if cfg.get("run_operations"):
        missing = [op for op in cfg["run_operations"] if op not in cfg["operations"]]
        if missing:
            raise ConfigError(f"config: 'run_operations' names {', '.join(missing)}, which 'operations' does not configure.")
        cfg["operations"] = {op: spec for op, spec in cfg["operations"].items() if op in cfg["run_operations"]}
        cfg["variants"] = [v for v in cfg["variants"] if v.split(".", 1)[0] in cfg["operations"]]
    return cfg


def _cuda_source(op: str) -> str:
    """The text of our CUDA kernels of `op` ('' where there is none)."""
    path = ROOT / "kernels" / op / ops.SOURCE_FILES["cuda"].format(name=op)
    return path.read_text() if path.is_file() else ""


def _semantic_checks(cfg: dict[str, Any]) -> None:

    for entry in cfg.get("variants") or []:
        op_name, _, name = entry.partition(".")
        defined = (cfg["operations"].get(op_name) or {}).get("variants") or {}
        if name not in defined:
            known = ", ".join(f"{o}.{v}" for o, spec in cfg["operations"].items() for v in (spec.get("variants") or {}))
            raise ConfigError(f"config: 'variants' lists {entry!r}, which is not a variant defined under "
                              f"operations.<op>.variants; defined: {known or 'none'}.")
        base = defined[name]["base"]
        if base not in list(cfg["operations"][op_name].get("implementations") or cfg["implementations"]):
            raise ConfigError(f"config: variant {entry!r} varies '{base}', which operation '{op_name}' does not measure.")
        if defined[name].get("delay") is not None and variants.DELAY_DEFINE not in _cuda_source(op_name):
            raise ConfigError(f"config: variant {entry!r} plants a delay, which kernels/{op_name}/{op_name}.cu does not "
                              f"read ({variants.DELAY_DEFINE}).")

    for op_name, spec in cfg["operations"].items():
        op = ops.get(op_name)
        if "external" in implementations(cfg, op_name) and "external" not in spec:
            raise ConfigError(f"config: operation '{op_name}' lists the implementation 'external' but has no "
                              f"'operations.{op_name}.external' block saying which PTX or cubin to load.")
        if "external" in spec:

            try:
                validate_external(spec["external"], op.dim_names, None, spec.keys())
            except EvidenceError as exc:
                raise ConfigError(f"config: 'operations.{op_name}.external': {exc}") from None
        for shape in [spec["default"], *spec["sweep"]]:
            try:
                op.validate_shape(shape)
            except ConfigError:
                raise
            except Exception as exc:  # the op's own one-sentence reason
                raise ConfigError(f"config: shape {shape!r} of operation '{op_name}': {exc}") from None
            moved = op.bytes_moved(shape)
            if moved > MAX_CALL_BYTES:
                raise ConfigError(
                    f"config: shape {shape!r} of operation '{op_name}' moves {moved / 2**30:.1f} GiB "
                    f"per call, over the {MAX_CALL_BYTES // 2**30} GiB limit.")


def _target_checks(cfg: Mapping[str, Any]) -> None:
    """What the schema cannot say of `targets` (harness.tables.targets), one sentence each: names
    unique, operations that exist (harness/ops/) and shapes each of them accepts (a target holds
    only where a run measures the operation, the shape and both sides of its ratio, so an overlay
    that measures less leaves it out there), something asked, and a verdict only of a pair every
    run compares (ops.PAIRS)."""
    names: set[str] = set()
    for target in cfg.get("targets") or []:
        name = target["name"]
        where = f"config: target {name!r}"
        if name in names:
            raise ConfigError(f"config: two targets are named {name!r}; each target needs a name of its own.")
        names.add(name)
        named = list(cfg["operations"]) if target["ops"] == "all" else list(target["ops"])
        unknown = [op for op in named if op not in ops.known()]
        if unknown:
            raise ConfigError(f"{where} names {', '.join(unknown)}, which is no operation (harness/ops/ has "
                              f"{', '.join(ops.known())}).")
        a, b = target["ratio"].split("/")
        if a == b:
            raise ConfigError(f"{where} compares {a} with itself; its ratio needs two implementations.")
        for op in named:
            for shape in target["shapes"] if isinstance(target["shapes"], list) else ():
                try:
                    ops.get(op).validate_shape(shape)
                except Exception as exc:  # the op's own one-sentence reason
                    raise ConfigError(f"{where} names the shape {shape!r} of {op}: {exc}") from None
        if target.get("at_most") is None and target.get("at_least") is None and not target.get("verdict"):
            raise ConfigError(f"{where} asks nothing of its ratio: give at_most, at_least or verdict.")
        if target.get("or_at_copy") is not None and not target.get("verdict"):
            raise ConfigError(f"{where} gives or_at_copy without a verdict; it lets a 'same' verdict count as met.")
        if target.get("verdict") and (target["metric"] != "kernel" or ((a, b) not in ops.PAIRS
                                                                        and (b, a) not in ops.PAIRS)):
            pairs = ", ".join(f"{x}/{y}" for x, y in ops.PAIRS)
            raise ConfigError(f"{where} asks a verdict of the {target['metric']} ratio {target['ratio']}, which has "
                              f"no interval; a verdict is of the kernel time of {pairs} (either way round).")


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Nested update, as snakemake merges --configfile files over the configfile."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def load(path: str | Path = ROOT / "config.yaml", *overrides: str | Path) -> dict[str, Any]:
    """Read and validate a config file, with override files merged over it in order."""
    raw = _read(path)
    for extra in overrides:
        raw = _merge(raw, _read(extra))
    return validate(raw)


def check_file(path: str | Path) -> None:
    """ConfigError (one sentence) where a config file is one `load` refuses: larger than
    MAX_CONFIG_BYTES, not UTF-8, nested too deep, an alias bomb, not a mapping. The Snakefile asks
    it of every --configfile, which Snakemake has merged into its config already, so the run and
    `python -m harness config` refuse the same files."""
    _read(path)


def _read(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)  # never more: a config the size of a disk is refused unread
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config: {shown(path)} is larger than {MAX_CONFIG_BYTES} bytes, which no configuration "
                              "is; it is refused unread.")
        text = data.decode("utf-8")
        # JSON is read as JSON: YAML 1.1 reads JSON's 1e-05 as a string
        raw = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"config: {shown(path)} nests mappings or lists more than {MAX_CONFIG_DEPTH} levels deep.") from None
    except FileNotFoundError:
        raise ConfigError(f"config: no configuration file at {shown(path)}.") from None
    except IsADirectoryError:
        raise ConfigError(f"config: {shown(path)} is a folder, not a configuration file.") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config: {shown(path)} is not UTF-8 text (byte {exc.start} cannot be read).") from None
    except OSError as exc:
        raise ConfigError(f"config: {shown(path)} cannot be read ({exc.strerror}).") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config: {shown(path)} is not valid JSON ({exc.msg} at line {exc.lineno}).") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config: {shown(path)} is not valid YAML ({shown(str(exc).splitlines()[0])}).") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"config: {shown(path)} must hold a mapping of keys, not {type(raw).__name__}.")
    check_size(raw, shown(path))
    return dict(raw)


AUTO_NAMESPACE = "auto"


def resolve_namespace(cfg: Mapping[str, Any], root: str | Path) -> str:
    """The namespace a run writes: the config's `namespace`, or with `namespace: auto` the next in
    the sequence `<namespace_prefix>-1, -2, ...` under `<root>/artifacts`. A namespace of the
    sequence whose report was not rendered yet (an interrupted run) is resumed rather than skipped,
    so rerunning the same command completes it."""
    name = str(cfg["namespace"])
    if name != AUTO_NAMESPACE:
        return name
    prefix = str(cfg["namespace_prefix"])
    pattern = re.compile(rf"{re.escape(prefix)}-(\d+)")
    numbers = sorted(int(m.group(1)) for d in (Path(root) / "artifacts").glob(f"{prefix}-*")
                     if d.is_dir() and (m := pattern.fullmatch(d.name)))
    if not numbers:
        return f"{prefix}-1"
    last = numbers[-1]
    finished = (Path(root) / "report" / f"{prefix}-{last}" / "field_note.md").is_file()
    return f"{prefix}-{last + 1}" if finished else f"{prefix}-{last}"


def shapes(cfg: Mapping[str, Any], op: str) -> list[str]:
    """All shapes of an operation: the default first, then the sweep, without repeats."""
    spec = cfg["operations"][op]
    out: list[str] = []
    for s in [spec["default"], *spec["sweep"]]:
        if s not in out:
            out.append(s)
    return out


def base_implementations(cfg: Mapping[str, Any], op: str) -> list[str]:
    """The implementations of one operation by kind (ours in CUDA and Triton, the library's, an
    external kernel): its own list, else the top-level one; no variant, no baseline revision."""
    return list(cfg["operations"][op].get("implementations") or cfg["implementations"])


def implementations(cfg: Mapping[str, Any], op: str) -> list[str]:
    """The implementations compared for one operation: its base implementations, then
    the variants of it this run enables (named '<base>.<variant>', e.g. 'cuda.min_blocks_16'), then
    ours at each baseline revision (named '<impl>@<label>', e.g. 'cuda@main'; harness.baseline)."""
    base = base_implementations(cfg, op)
    at = [f"{impl}{baseline.SEPARATOR}{label}" for label in baseline_labels(cfg) for impl in base if impl in ops.OURS]
    return base + variant_impls(cfg, op) + at


def baseline_revisions(cfg: Mapping[str, Any]) -> list[str]:
    """The baseline revisions as written, a list (the config takes one or several)."""
    value = cfg.get("baseline") or []
    return [value] if isinstance(value, str) else list(value)


def baseline_labels(cfg: Mapping[str, Any]) -> list[str]:
    """The labels of the baseline revisions (harness.baseline.label), in the order written."""
    return [baseline.label(rev) for rev in baseline_revisions(cfg)]


BASELINE_DIR = "baseline"
"""Under a namespace's artifacts/<ns>/, the folder of each baseline revision's kernel sources."""


def baseline_roots(cfg: Mapping[str, Any]) -> dict[str, str]:
    """label -> the folder of that revision's kernel sources, relative to the repository root."""
    return {label: f"artifacts/{cfg['namespace']}/{BASELINE_DIR}/{label}" for label in baseline_labels(cfg)}


def variant_impls(cfg: Mapping[str, Any], op: str) -> list[str]:
    """The enabled variants of one operation as implementation names, '<base>.<variant>'."""
    defined = cfg["operations"][op].get("variants") or {}
    out = []
    for entry in cfg.get("variants") or []:
        op_name, _, name = entry.partition(".")
        if op_name == op and name in defined:
            out.append(f"{defined[name]['base']}.{name}")
    return out


def jobs(cfg: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """Every (operation, shape, implementation) the configuration asks for."""
    for op in cfg["operations"]:
        for shape in shapes(cfg, op):
            for impl in implementations(cfg, op):
                yield op, shape, impl


# ----------------------------------------------------------------------------- what each rule reads
# A rule's params are the values it uses: Snakemake reruns a job whose params changed, so a rule
# that took the whole configuration would rerun for any edit. Values that do not change what a job
# measures or writes (tool paths, timeouts, the lock wait, the quiet-GPU policy) are not params:
# `operational` reads them at run time.

OPERATIONAL_KEYS = ("gpu_lock_timeout_s", "timeouts", "gpu_state", "nsys.path", "counters.ncu", "counters.timeout_s",
                    "span.exclusive")
"""Keys that never rerun a job (docs/configuration.md)."""


def recorded(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The config as the provenance records it: without OPERATIONAL_KEYS, which change no number
    (a longer timeout reruns nothing, not even the provenance)."""
    out = copy.deepcopy(dict(cfg))
    for key in OPERATIONAL_KEYS:
        *parents, last = key.split(".")
        node: Any = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return out


def operation_block(cfg: Mapping[str, Any], op: str) -> dict[str, Any]:
    """The operation's config block as its measurements use it: without its shapes (each group
    knows its own, so adding a shape reruns nothing else) and with only the variants this run
    measures."""
    spec = cfg["operations"][op]
    enabled = {impl.partition(".")[2] for impl in variant_impls(cfg, op)}
    block = {k: v for k, v in spec.items() if k not in ("default", "sweep", "variants", "implementations")}
    block["variants"] = {name: {"base": v["base"], "defines": variants.defines(v),
                                **{k: v[k] for k in ("grow", "delay") if v.get(k) is not None}}
                         for name, v in (spec.get("variants") or {}).items() if name in enabled}
    return block


def build_block(cfg: Mapping[str, Any], op: str) -> dict[str, Any]:
    """What the build of `op` reads from its block: the variants' defines and the external kernel
    (a tolerance, a reference setting or a planted slowdown reruns no build)."""
    block = operation_block(cfg, op)
    out: dict[str, Any] = {k: block[k] for k in ("variants", "external") if k in block}
    out["variants"] = {name: {"base": v["base"], "defines": v["defines"]} for name, v in out["variants"].items()}
    return out


def variant_descriptions(cfg: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """op -> variant name -> its description, for the tables (the measurements never read these)."""
    return {op: {name: str(v.get("description", "")) for name, v in (spec.get("variants") or {}).items()}
            for op, spec in cfg["operations"].items()}


def measure_plan(cfg: Mapping[str, Any], op: str) -> dict[str, Any]:
    """What a measurement group of `op` depends on (harness.measure.group's plan, less the group)."""
    params = operation_block(cfg, op)
    if baseline_labels(cfg):
        params["baselines"] = baseline_roots(cfg)
    return {"params": params, "seed": cfg["seed"], "cache_mode": cfg["cache_mode"],
            "capture": dict(cfg["capture"]), "span": {k: v for k, v in cfg["span"].items() if k != "exclusive"},
            "cross_check": {k: cfg["cross_check"][k] for k in ("enabled", "calls", "replays", "max_seconds", "idle_starts")},
            "nsys": {"trace": list(cfg["nsys"]["trace"]), "extra_args": list(cfg["nsys"]["extra_args"])}}


def counters_plan(cfg: Mapping[str, Any], op: str) -> dict[str, Any]:
    """The group plan of the counters' run: one round of `counters.iterations` calls after
    `counters.warmup`, no spans (ncu replays each kernel of the round once per metric pass)."""
    c = cfg["counters"]
    plan = measure_plan(cfg, op)
    plan["capture"] = {"warmup": c["warmup"], "rounds": 1, "round_us": 1.0e9, "max_calls": c["iterations"]}
    plan["cross_check"] = {**plan["cross_check"], "enabled": False}
    return plan


def operational(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The values a job reads at run time and that never rerun it (OPERATIONAL_KEYS)."""
    return {"gpu_lock_timeout_s": cfg["gpu_lock_timeout_s"], "timeout_s": cfg["timeouts"]["measure_s"],
            "check_s": cfg["timeouts"]["check_s"],
            "gpu_state": dict(cfg["gpu_state"]), "nsys_path": cfg["nsys"]["path"], "ncu_path": cfg["counters"]["ncu"],
            "ncu_timeout_s": cfg["counters"]["timeout_s"]}


REPORT_KEYS = ("namespace", "arch", "cache_mode", "operations", "capture", "span", "cross_check", "counters", "trust",
               "verdict", "ceilings")
"""The config the render reads: a change elsewhere (a timeout, a path) does not re-render."""


def report_params(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The part of the config the render reads (REPORT_KEYS), without OPERATIONAL_KEYS."""
    kept = recorded(cfg)
    return {k: kept[k] for k in REPORT_KEYS if k in kept}


def targets_plan(cfg: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What judging the targets reads of each configured operation (harness.tables.targets):
    its default, its sweep and its base implementations; from a run's config or the one a
    namespace's provenance recorded."""
    return {str(op): {"default": spec["default"], "sweep": list(spec["sweep"]),
                      "implementations": base_implementations(cfg, op)} for op, spec in cfg["operations"].items()}


def same_size_bytes(cfg: Mapping[str, Any]) -> list[int]:
    """The byte counts of the same-size copy ceiling: each configured shape's fewest bytes moved."""
    return sorted({ops.get(op).bytes_moved(shape) for op in cfg["operations"] for shape in shapes(cfg, op)})


def group_shapes(cfg: Mapping[str, Any], op: str, which: str) -> list[str]:
    """`which` = 'default' (the default shape) or 'all' (every shape) of an operation."""
    return [cfg["operations"][op]["default"]] if which == "default" else shapes(cfg, op)
