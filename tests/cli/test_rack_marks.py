"""The racks table says which rack is degraded and which failed, in words."""

from __future__ import annotations

from rich.console import Console

from rackplane.cli._render import occupancy_table
from rackplane.models import RackHealth
from rackplane.projections import rack_occupancy
from tests.builders import racks_healthy_degraded_failed


def test_the_racks_table_marks_a_degraded_rack_apart_from_a_failed_one() -> None:
    rows = rack_occupancy(racks_healthy_degraded_failed().state)
    assert [r.health for r in rows] == [RackHealth.HEALTHY, RackHealth.DEGRADED, RackHealth.FAILED]
    console = Console(width=120, record=True)
    console.print(occupancy_table(rows))
    lines = {line.split()[1]: line for line in console.export_text().splitlines() if "r0" in line}
    assert "degraded" not in lines["r01"] and "fault" not in lines["r01"]
    assert "(degraded)" in lines["r02"]
    assert "(rack fault)" in lines["r03"]
