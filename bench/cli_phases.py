"""Where one client command's time goes (issue 20): marks inside a single `rackplane` process.

    python -m bench.cli_phases submit --broker kafka://127.0.0.1:PORT --cluster C --nodes 2 \\
        --job J --no-wait

Runs the command as `rackplane` would (`rackplane.cli.main`), with the client's steps
wrapped to note when each ended: the CLI package (typer), the import of the command's module,
the settings and client made, the producer started, the reader started, the command sent and
acknowledged, its events read back, and the rest (the table printed). The marks go to
stderr, in ms since this module began (the interpreter's own start, ~40 ms here, is before
it). Figures: docs/BENCHMARKS.md, "CLI commands, what a client command imports".
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

_MARKS: list[tuple[str, float]] = []


def mark(name: str) -> None:
    """Note that the step `name` ended now."""
    _MARKS.append((name, time.perf_counter()))


def _wrap(owner: Any, attr: str, name: str) -> None:
    original: Callable[..., Any] = getattr(owner, attr)

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = await original(*args, **kwargs)
        mark(name)
        return result

    setattr(owner, attr, wrapped)


def main(argv: list[str]) -> None:
    """Run `rackplane *argv` with marks, then print them to stderr."""
    import rackplane.cli as cli

    mark("rackplane.cli (typer)")
    import rackplane.cli._client  # noqa: F401  # the module `submit` and its kin live in

    mark("the command's module")
    import rackplane.streams.client as client

    original_enter = client.Client.__aenter__

    async def enter(self: client.Client) -> client.Client:
        mark("settings and client")
        entered = await original_enter(self)
        mark("producer started")
        return entered

    client.Client.__aenter__ = enter  # type: ignore[method-assign]
    _wrap(client.Client, "reader_of", "reader started")
    _wrap(client.Client, "send", "sent, acknowledged")
    _wrap(client, "_collect", "events read back")
    sys.argv = ["rackplane", *argv]
    leave = cli.leave
    cli.leave = sys.exit  # type: ignore[assignment]  # the process ends below, marks printed
    code: object = None
    try:
        cli.main()
    except SystemExit as done:  # a rejection exits 1: its marks still count
        code = done.code
    mark("the rest (the table)")
    before = T0
    for name, at in _MARKS:
        print(
            f"{name:28s} {1000 * (at - before):7.1f} ms  (at {1000 * (at - T0):7.1f})",
            file=sys.stderr,
        )
        before = at
    leave(code)  # as `rackplane` ends a client command (its finalization not in the marks)


if __name__ == "__main__":
    main(sys.argv[1:])
