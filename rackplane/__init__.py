"""rackplane: an event-sourced control plane for rack-scale GPU clusters."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rackplane")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
