"""Operator overrides of the XID table come from the cluster file, through the event log."""

from __future__ import annotations

import pytest

from rackplane.importers import parse_cluster_file
from rackplane.importers.errors import TopologyFileError
from rackplane.models import COMMANDS, Health, PolicySettings, RegisterTopology, XidAction
from rackplane.policies import GpuHealthRules
from tests.gpu._samples import sick

FILE = """\
cluster: c1
racks:
  - {id: r01, nodes: "r01-n[01-18]"}
policy:
  spares_per_rack: 2
  xid_actions: {94: reboot_node, 13: none}
"""


def test_the_cluster_file_carries_xid_overrides() -> None:
    policy = parse_cluster_file(FILE, "cluster.yaml").policy
    assert policy.xid_actions == {94: XidAction.REBOOT_NODE, 13: XidAction.NONE}


def test_an_unknown_action_in_the_cluster_file_is_a_clear_error() -> None:
    with pytest.raises(TopologyFileError, match="xid_actions"):
        parse_cluster_file(FILE.replace("reboot_node", "panic"), "cluster.yaml")


def test_overrides_survive_the_register_command_round_trip() -> None:
    cf = parse_cluster_file(FILE, "cluster.yaml")
    command = RegisterTopology(
        id="reg", cluster="c1", actor="op", topology=cf.topology, settings=cf.policy
    )
    back = COMMANDS.validate_json(command.model_dump_json())
    assert isinstance(back, RegisterTopology)
    assert back.settings.xid_actions == {94: XidAction.REBOOT_NODE, 13: XidAction.NONE}


def test_the_default_policy_has_no_overrides() -> None:
    assert PolicySettings().xid_actions == {}


def test_an_override_from_the_file_makes_xid_94_fail_the_node() -> None:
    overrides = parse_cluster_file(FILE, "cluster.yaml").policy.xid_actions
    rules = GpuHealthRules()
    verdicts = [rules.classify(sick(s, xid=94), overrides=overrides) for s in (0, 1)]
    assert verdicts[-1].health is Health.FAILED and "(operator)" in verdicts[-1].cause
