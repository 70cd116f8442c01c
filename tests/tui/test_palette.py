"""The cluster view's colours say the same thing in a 256- or 16-colour terminal.

Rich downgrades each truecolour to the nearest colour the terminal has (`Color.downgrade`, as
Textual renders it); two colours that land on the same number look the same there. A job
colour that landed on the spare colour made a full rack look all-spare.
"""

from __future__ import annotations

import math
from itertools import combinations

import pytest
from rich.color import Color, ColorSystem

from rackplane.projections import NodeRole, node_roles
from rackplane.tui._cells import (
    DEGRADED_MARK,
    FAILED_MARK,
    HELD_MARK,
    JOB_PALETTE,
    LABEL_SEGMENTS,
    RACK_LEGEND,
    RESERVED,
    STATE_COLOURS,
    WARN,
    layout_of,
    render_rack,
)
from rackplane.tui._lines import legend
from rackplane.tui._timeline import Timeline
from tests.builders import racks_healthy_degraded_failed
from tests.tui.conftest import story

SYSTEMS = [
    pytest.param(ColorSystem.EIGHT_BIT, id="256-colours"),
    pytest.param(ColorSystem.STANDARD, id="16-colours"),
]


def shown(colour: str | Color, system: ColorSystem) -> int:
    """The colour number a terminal of `system` shows for `colour`."""
    c = Color.parse(colour) if isinstance(colour, str) else colour
    number = c.downgrade(system).number
    assert number is not None
    return number


def distance(a: str, b: str) -> float:
    """Perceptual-ish RGB distance ("redmean")."""
    (r1, g1, b1), (r2, g2, b2) = Color.parse(a).get_truecolor(), Color.parse(b).get_truecolor()
    r = (r1 + r2) / 2
    return math.sqrt(
        (2 + r / 256) * (r1 - r2) ** 2 + 4 * (g1 - g2) ** 2 + (2 + (255 - r) / 256) * (b1 - b2) ** 2
    )


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_state_colour_stays_distinct_from_the_others(system: ColorSystem) -> None:
    numbers = {state: shown(c, system) for state, c in STATE_COLOURS.items()}
    same = [(a, b) for a, b in combinations(numbers, 2) if numbers[a] == numbers[b]]
    assert same == [], numbers


@pytest.mark.parametrize("system", SYSTEMS)
def test_no_job_colour_is_shown_as_a_state_colour(system: ColorSystem) -> None:
    states = {shown(c, system): state for state, c in STATE_COLOURS.items()}
    clashes = {job: states[n] for job in JOB_PALETTE if (n := shown(job, system)) in states}
    assert clashes == {}


def test_job_colours_stay_far_from_state_colours_in_truecolour_and_apart_in_256() -> None:
    nearest = min(distance(j, s) for j in JOB_PALETTE for s in STATE_COLOURS.values())
    assert nearest > 120
    assert len({shown(j, ColorSystem.EIGHT_BIT) for j in JOB_PALETTE}) == len(JOB_PALETTE)
    assert len({shown(j, ColorSystem.STANDARD) for j in JOB_PALETTE}) >= 6


@pytest.mark.parametrize("system", SYSTEMS)
def test_no_job_cell_of_the_story_looks_like_a_spare_free_or_failed_cell(
    system: ColorSystem,
) -> None:
    events = story()
    t = Timeline(events[0].cluster)
    t.append(events)
    by_role: dict[NodeRole, set[int]] = {role: set() for role in NodeRole}
    for position in (100, len(t)):  # mid-story (a defrag under way) and the end
        state = t.state_at(position)
        layout = layout_of(state)
        for rack in state.racks:
            row = render_rack(state, rack, layout)
            cells = row.segments[LABEL_SEGMENTS : LABEL_SEGMENTS + len(row.nodes)]
            for role, cell in zip(node_roles(state, rack).values(), cells, strict=True):
                assert cell.style is not None and cell.style.bgcolor is not None
                by_role[role].add(shown(cell.style.bgcolor, system))
    jobs = by_role.pop(NodeRole.ALLOCATED)
    assert jobs and by_role[NodeRole.SPARE] and by_role[NodeRole.FREE] and by_role[NodeRole.FAILED]
    for role, numbers in by_role.items():
        assert not jobs & numbers, role


def test_a_held_rack_is_marked_and_the_legend_says_what_the_mark_means() -> None:
    events = story()
    t = Timeline(events[0].cluster)
    t.append(events)
    position = next(p for p in range(len(t)) if t.state_at(p).reservations)
    state = t.state_at(position)
    held = sorted(state.reservations)
    layout = layout_of(state)
    for rack in state.racks:
        label, mark = render_rack(state, rack, layout).segments[:2]
        if rack in held:
            assert (mark.text, mark.style, label.style) == (HELD_MARK, RESERVED, RESERVED)
        else:
            assert mark.text in (" ", FAILED_MARK, DEGRADED_MARK)
    shown_legend = legend().plain
    for text, _, sample in RACK_LEGEND:
        assert f"{sample} {text}" in shown_legend
    assert f"r07{HELD_MARK} held for a job (defrag plan, reservation)" in shown_legend


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_rack_label_colours_stay_apart(system: ColorSystem) -> None:
    colours = [style.color for _, style, _ in RACK_LEGEND]
    assert all(c is not None for c in colours)
    assert len({shown(c, system) for c in colours if c is not None}) == len(colours)


def test_a_degraded_rack_is_marked_apart_from_a_failed_one_and_the_legend_says_both() -> None:
    h = racks_healthy_degraded_failed()
    layout = layout_of(h.state)
    marks = {r: render_rack(h.state, r, layout).segments[1] for r in ("r01", "r02", "r03")}
    assert [m.text for m in marks.values()] == [" ", DEGRADED_MARK, FAILED_MARK]
    assert marks["r02"].style == WARN and marks["r03"].style != WARN
    # the degraded rack's free nodes are still free (it takes work when no healthy rack fits)
    assert set(node_roles(h.state, "r02").values()) <= {NodeRole.FREE, NodeRole.SPARE}
    shown_legend = legend().plain
    assert f"r07{DEGRADED_MARK} degraded (NVSwitch tray lost)" in shown_legend
    assert f"r07{FAILED_MARK} failed (NVLink domain, power)" in shown_legend
