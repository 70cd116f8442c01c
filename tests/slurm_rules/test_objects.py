"""Reading Slurm's client commands (`rackplane.slurm.objects`): real output of Slurm 22.05
(tests/slurm/fixtures, captured on the test cluster: README there) and the user texts that
break a plain `|` format."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rackplane.slurm.objects import (
    FIELD_SEP,
    RECORD_END,
    ParseError,
    SlurmNode,
    parse_sinfo_json,
    parse_squeue,
)

FIXTURES = Path(__file__).parents[1] / "slurm" / "fixtures"


def test_sinfo_json_gives_each_nodes_state_flags_and_reason() -> None:
    nodes = parse_sinfo_json((FIXTURES / "sinfo.json").read_text(), partition="gpu")
    assert len(nodes) == 54
    assert nodes["r01n01"] == SlurmNode(
        "r01n01", "IDLE", frozenset({"DRAIN"}), "rackplane: cordoned by test"
    )
    assert nodes["r01n01"].drained and not nodes["r01n01"].problems
    assert nodes["r03n06"].problems == ("down", "rackplane: xid 79")
    assert nodes["r03n18"].problems == ("down", "not responding", "Not responding")
    assert not SlurmNode("x", "IDLE", frozenset({"NOT_RESPONDING"})).problems  # idle*
    assert nodes["r03n02"].drained and nodes["r03n02"].state == "ALLOCATED"
    assert not nodes["r02n01"].problems and not nodes["r02n01"].drained


def test_sinfo_json_of_another_partition_has_none_of_these_nodes() -> None:
    assert parse_sinfo_json((FIXTURES / "sinfo.json").read_text(), partition="cpu") == {}


@pytest.mark.parametrize("text", ["", "{}", '{"nodes": [{"state": "idle"}]}', "not json"])
def test_sinfo_output_that_is_not_its_json_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError, match="sinfo --json printed something else"):
        parse_sinfo_json(text)


def record(*fields: str) -> str:
    return FIELD_SEP.join(fields) + RECORD_END + "\n"


def test_squeue_records_keep_pipes_newlines_and_separators_in_the_user_texts() -> None:
    text = (
        record("4", "RUNNING", "16", "None", "r02n[01-16]", "r02n[01-16]", "root", "research",
               "2026-12-02T00:36:22", "rackplane: slice-size=16")
        + record("9", "PENDING", "2", "job requeued in held state", "", "r01n[03-04]", "bob",
                 "rl", "N/A", "c|1" + FIELD_SEP + "c2\nc3")
        + record("3", "PENDING", "16", "JobHeldUser", "", "", "root", "", "N/A", "(null)")
    )  # fmt: skip
    jobs, bad = parse_squeue(text)
    assert bad == []
    running, requeued, held = jobs
    assert running.nodes == tuple(f"r02n{i:02d}" for i in range(1, 17))
    assert running.started == datetime(2026, 12, 2, 0, 36, 22, tzinfo=UTC)
    assert running.active and not running.pending
    assert requeued.held and requeued.required == ("r01n03", "r01n04")
    assert requeued.comment == "c|1" + FIELD_SEP + "c2\nc3"
    assert (running.account, requeued.account, held.account) == ("research", "rl", "")
    assert held.held and held.comment == "" and held.started is None and held.job == "slurm/3"


def test_a_squeue_record_that_cannot_be_read_is_reported_and_the_rest_kept() -> None:
    text = record("5", "RUNNING", "two", "None", "", "", "a", "", "N/A", "") + record(
        "6", "PENDING", "1", "JobHeldUser", "", "", "a", "", "N/A", "rackplane: \x1e\nkind=x"
    )
    jobs, bad = parse_squeue(text)
    assert [(j.id, j.comment) for j in jobs] == [("6", "rackplane: ")]  # cut at the record end
    assert len(bad) == 2 and "invalid literal" in bad[0] and "1 fields" in bad[1]
