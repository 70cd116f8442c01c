"""Configuration: one settings model (pydantic), its layers, its docs. An adapter.

Defaults < YAML config file < `RACKPLANE_*` environment variables < command-line flags.
"""

from rackplane.config._load import (
    CONFIG_ENV,
    MASK,
    ConfigError,
    Loaded,
    load_settings,
    masked,
    read_config_file,
)
from rackplane.config._model import ENV_PREFIX, POLICY_AGENTS, RackplaneSettings


def render_config_doc() -> str:
    """The whole of docs/CONFIG.md (`rackplane.config._doc`, imported only for this)."""
    from rackplane.config._doc import render_config_doc as render

    return render()


__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "MASK",
    "POLICY_AGENTS",
    "ConfigError",
    "Loaded",
    "RackplaneSettings",
    "load_settings",
    "masked",
    "read_config_file",
    "render_config_doc",
]
