"""The fault suite's own judge: commands decided out of their partition's order are named."""

from __future__ import annotations

from datetime import UTC, datetime

from rackplane.models import NodeCordoned
from tests.faults._check import Verdict, _in_command_order


def cordoned(seq: int, offset: int | None) -> NodeCordoned:
    return NodeCordoned(
        id=f"e{seq}",
        actor="controller",
        cluster="c",
        seq=seq,
        at=datetime(2026, 12, 1, tzinfo=UTC),
        causation_id=f"cmd-{seq}",
        node="r0-n1",
        reason="test",
        command_partition=None if offset is None else 1,
        command_offset=offset,
    )


def test_a_command_decided_after_a_later_one_of_its_partition_is_a_problem() -> None:
    v = Verdict("order")
    _in_command_order("c", [cordoned(1, 10), cordoned(2, 10), cordoned(3, 12)], v)
    assert v.problems == []  # one command's events share an offset
    _in_command_order(
        "c", [cordoned(1, 10), cordoned(2, None), cordoned(3, 14), cordoned(4, 12)], v
    )
    assert v.problems == ["c seq 4: decided commands[1]@12 after commands[1]@14 (seq 3)"]
    assert v.counts["decided_out_of_order"] == 1
