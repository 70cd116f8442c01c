"""Build the effective settings from the four layers and say where each value came from."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr, ValidationError

from rackplane.config._model import ENV_PREFIX, FILE_VALUES, RackplaneSettings
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
    token = FILE_VALUES.set(file_values)
    try:
        settings = RackplaneSettings(**given)
    except ValidationError as err:
        raise ConfigError(_explain(err, path, given, file_values)) from err
    finally:
        FILE_VALUES.reset(token)
    origins = {name: _origin(name, given, file_values) for name in RackplaneSettings.model_fields}
    return Loaded(settings, path, origins)


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
