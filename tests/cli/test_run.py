"""`rackplane.cli._run.run`: asyncio.run for commands whose coroutine returns a large value."""

from __future__ import annotations

import pytest

from rackplane.cli._run import run


class _Huge:
    """Stands for a cluster view: its repr is what must not be built."""

    reprs = 0

    def __repr__(self) -> str:
        _Huge.reprs += 1
        return "<huge>"


def test_the_result_comes_back_without_its_repr_being_built() -> None:
    async def read() -> _Huge:
        return _Huge()

    _Huge.reprs = 0
    got = run(read())
    assert isinstance(got, _Huge)
    assert _Huge.reprs == 0


def test_what_the_coroutine_raises_comes_through() -> None:
    async def read() -> None:
        raise TimeoutError("no answer")

    with pytest.raises(TimeoutError, match="no answer"):
        run(read())
