"""rackplane: an event-sourced control plane for rack-scale GPU clusters."""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """`rackplane.__version__`, read from the installed metadata on first use (importing
    importlib.metadata costs every command ~25 ms at start)."""
    if name != "__version__":
        raise AttributeError(f"module 'rackplane' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rackplane")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+unknown"
