"""Build the effective settings from the four layers and say where each value came from."""

from __future__ import annotations

import json
import os
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo

from rackplane.config._model import ENV_PREFIX, RackplaneSettings, Raw
from rackplane.models._text import rule_of

CONFIG_ENV = "RACKPLANE_CONFIG"
"""Environment variable naming the config file when `--config` is not given."""

MASK = "****"

Origin = Literal["default", "file", "env", "flag"]


class ConfigError(Exception):
    """The configuration cannot be used; the message says which setting and why."""


@dataclass(frozen=True)
class Loaded:
    """The effective settings, the file they came from (if any), and each value's layer."""

    settings: RackplaneSettings
    file: Path | None
    origins: dict[str, Origin]


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings in a YAML config file (parsed safely: nothing in it runs as code).

    Raises:
        ConfigError: the file is missing, is not YAML, or is not a mapping of settings.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"config file {path}: {err.strerror or err}") from err
    import yaml  # ~20 ms: only a command given a config file pays it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path}: not valid YAML: {err}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of settings, got {type(data)}")
    return data


def load_settings(
    config_file: Path | None = None, flags: Mapping[str, Any] | None = None
) -> Loaded:
    """Defaults < config file < `RACKPLANE_*` environment < flags (None flags are not given).

    Args:
        config_file: a YAML file; default: the file `RACKPLANE_CONFIG` names, if any.
        flags: values from the command line, by setting name.

    Raises:
        ConfigError: a layer holds a value that is not valid, named with its layer.
    """
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    path = config_file or (Path(p) if (p := os.environ.get(CONFIG_ENV)) else None)
    file_values = read_config_file(path) if path is not None else {}
    values = _merged(file_values, env_values(os.environ), given)
    try:
        settings = RackplaneSettings.model_validate(values)
    except ValidationError as err:
        raise ConfigError(_explain(err, path, given, file_values)) from err
    origins = {name: _origin(name, given, file_values) for name in RackplaneSettings.model_fields}
    return Loaded(settings, path, origins)


NESTED = "__"
"""Between a model setting's name and its field's in a variable: `RACKPLANE_POLICY__ADMINS`."""


def env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """The environment's layer: `RACKPLANE_<SETTING>` for each setting, names in any case; a
    model setting's fields also one by one (`RACKPLANE_POLICY__<FIELD>`, over a JSON
    `RACKPLANE_POLICY`). List, tuple, mapping and model values are JSON, other values are
    given as written for the model to parse: the rules of pydantic-settings, which read this
    layer before (`Raw` marks a field whose validator splits a plain string instead).
    Variables with the prefix that name no setting are not read.

    Raises:
        ConfigError: a value that must be JSON is not; the message names the variable.
    """
    ours = {k.upper(): (k, v) for k, v in environ.items() if k.upper().startswith(ENV_PREFIX)}
    out: dict[str, Any] = {}
    if not ours:
        return out
    for name, field in RackplaneSettings.model_fields.items():
        key = (ENV_PREFIX + name).upper()
        if key in ours:
            out[name] = _decoded(*ours[key], field)
        model = _model_of(field.annotation)
        if model is None:
            continue
        start = key + NESTED
        parts = sorted((k[len(start) :].lower(), v) for k, v in ours.items() if k.startswith(start))
        if not parts:
            continue
        whole = out.get(name)
        merged = dict(whole) if isinstance(whole, dict) else {}
        for part, (var, raw) in parts:
            sub = model.model_fields.get(part)
            merged[part] = raw if sub is None else _decoded(var, raw, sub)
        out[name] = merged
    return out


def _decoded(var: str, raw: str, field: FieldInfo) -> Any:
    if any(isinstance(m, Raw) for m in field.metadata) or not _complex(field.annotation):
        return raw
    try:
        return json.loads(raw)
    except ValueError as err:
        raise ConfigError(
            f"invalid configuration: {var}: not valid JSON ({err}); this setting takes a JSON "
            f'value, e.g. {var}=\'["a", "b"]\' for a list'
        ) from err


def _members(annotation: Any) -> list[Any]:
    """The types a field's annotation allows, `Optional`, unions and `Annotated` unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [t for a in get_args(annotation) for t in _members(a) if t is not type(None)]
    return [annotation]


def _complex(annotation: Any) -> bool:
    """Whether the environment gives this field as JSON."""
    for t in _members(annotation):
        if (get_origin(t) or t) in (list, tuple, dict, set, frozenset) or _model_of(t):
            return True
    return False


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for t in _members(annotation):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def _merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """The layers, each over the ones before it; mappings merged key by key."""
    out: dict[str, Any] = {}
    for layer in layers:
        for k, v in layer.items():
            old = out.get(k)
            out[k] = _merged(old, v) if isinstance(old, dict) and isinstance(v, dict) else v
    return out


def _env_names(name: str) -> list[str]:
    upper = (ENV_PREFIX + name).upper()
    return [k for k in os.environ if k.upper() == upper or k.upper().startswith(upper + "__")]


def _origin(name: str, flags: Mapping[str, Any], file_values: Mapping[str, Any]) -> Origin:
    if name in flags:
        return "flag"
    if _env_names(name):
        return "env"
    if name in file_values:
        return "file"
    return "default"


def _explain(
    err: ValidationError, path: Path | None, flags: Mapping[str, Any], file: Mapping[str, Any]
) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "settings"
        name = str(e["loc"][0]) if e["loc"] else ""
        origin = _origin(name, flags, file) if name else "default"
        where = {
            "flag": " (from a flag)",
            "env": f" (from the environment: {', '.join(_env_names(name))})",
            "file": f" (in {path})",
            "default": "",
        }[origin]
        msg = e["msg"].removeprefix("Value error, ")
        rule = rule_of(e)  # an id's or a text's: which character, where (never the value)
        if rule is not None and isinstance(e.get("input"), str):
            msg = rule.problem(e["input"]) or msg
        if e["type"] == "extra_forbidden":
            msg = "not a rackplane setting (docs/CONFIG.md lists them)"
        lines.append(f"{loc}: {msg}{where}")
    return "invalid configuration: " + "; ".join(lines)


def masked(settings: RackplaneSettings) -> dict[str, Any]:
    """Every setting as JSON-ready values, each secret replaced by `****` (None stays None)."""
    out: dict[str, Any] = {}
    for name in RackplaneSettings.model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            out[name] = MASK
        elif name == "policy":  # overrides only: the rest comes from the cluster file
            out[name] = settings.policy.model_dump(mode="json", exclude_unset=True)
        else:
            out[name] = settings.model_dump(mode="json", include={name})[name]
    return out
