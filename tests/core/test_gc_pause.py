"""Phases that pause the cyclic garbage collector give it back as they found it."""

from __future__ import annotations

import gc

import pytest

from rackplane._gc import cycle_collection_paused
from rackplane.projections import EventGap, fold, initial_state
from tests.core.test_evolve_records import AT


def test_the_collector_is_off_inside_and_back_on_after_even_on_error() -> None:
    assert gc.isenabled()
    with cycle_collection_paused():
        assert not gc.isenabled()
        with cycle_collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves it as the outer one set it
    assert gc.isenabled()
    with pytest.raises(ValueError, match="boom"), cycle_collection_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_switched_off_by_the_caller_stays_off() -> None:
    gc.disable()
    try:
        with cycle_collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_fold_that_raises_leaves_the_collector_on() -> None:
    from rackplane.models import JobStarted

    gap = JobStarted(id="c/5", cluster="c", seq=5, at=AT, actor="runtime", job="j")
    with pytest.raises(EventGap):
        fold(initial_state("c"), [gap])
    assert gc.isenabled()
