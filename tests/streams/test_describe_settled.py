"""A topic just made may be unknown to the broker a moment: the describe asks again.

CI (the ACL tier, a SASL broker under load) saw `ensure_topics` fail right after creating the
topics: the describe answered UNKNOWN_TOPIC_OR_PARTITION (error 3) and the worker refused to
start with "topic rackplane.commands: error 3 describing it".
"""

from __future__ import annotations

from typing import Any

import pytest

from rackplane.streams.describe import DescribeError, describe_settled

UNKNOWN, AUTH = 3, 29


class Admin:
    """Answers the given error codes for `name`, one per describe, then the topic."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = codes
        self.calls = 0

    async def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        self.calls += 1
        code = self.codes.pop(0) if self.codes else 0
        return [
            {"topic": n, "error_code": code, "partitions": [] if code else [{}, {}]} for n in names
        ]


async def test_a_topic_the_broker_learns_a_moment_later_is_described() -> None:
    admin = Admin([UNKNOWN, UNKNOWN, 5])
    [topic] = await describe_settled(admin, ["p.events"], settle_s=5)
    assert len(topic["partitions"]) == 2
    assert admin.calls == 4


async def test_a_topic_still_unknown_after_the_wait_is_an_error_that_names_it() -> None:
    admin = Admin([UNKNOWN] * 1000)
    with pytest.raises(DescribeError) as err:
        await describe_settled(admin, ["p.events"], settle_s=0.3)
    assert str(err.value) == (
        "topic p.events: UnknownTopicOrPartitionError describing it after 0.3 s"
    )
    assert 2 <= admin.calls < 20  # it asked again, with a growing pause


async def test_another_error_is_not_waited_out() -> None:
    admin = Admin([AUTH])
    with pytest.raises(DescribeError, match=r"TopicAuthorizationFailedError describing it$"):
        await describe_settled(admin, ["p.events"], settle_s=5)
    assert admin.calls == 1
