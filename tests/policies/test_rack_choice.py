"""The rack choice read from a `View`'s indexes (racks by room, slices per pod) is the brute-force
`choose_racks` over the same table, on random fabrics (pods, superpods) and random rooms:
built anew, or patched from another table with its indexes filled first."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rackplane.models import Pod, Rack, Topology, TopologyIndex
from rackplane.policies._rack_choice import View, choose_on_view, choose_racks


@st.composite
def fabrics(draw: st.DrawFn) -> TopologyIndex:
    """1-12 racks in 1-4 pods, the pods in up to 2 superpods or none."""
    count = draw(st.integers(1, 12))
    pods = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
    superpods = draw(st.lists(st.sampled_from([None, "s0", "s1"]), min_size=4, max_size=4))
    racks = tuple(
        Rack(id=f"r{i:02d}", pod=f"p{p}", nodes=(f"r{i:02d}-n01",)) for i, p in enumerate(pods)
    )
    used = sorted({r.pod for r in racks})
    listed = tuple(Pod(id=p, superpod=superpods[int(p[1:])]) for p in used)
    return TopologyIndex(Topology(cluster="c", racks=racks, pods=listed))


def rooms(index: TopologyIndex) -> st.SearchStrategy[dict[str, int]]:
    """Room per rack, in topology order, many racks alike (ties)."""
    ids = [r.id for r in index.racks]
    return st.lists(st.integers(0, 9), min_size=len(ids), max_size=len(ids)).map(
        lambda us: dict(zip(ids, us, strict=True))
    )


@st.composite
def shapes(draw: st.DrawFn) -> tuple[int, ...]:
    """k full slices of s nodes, maybe a smaller remainder."""
    s, k = draw(st.integers(1, 6)), draw(st.integers(1, 5))
    rest = draw(st.integers(0, s - 1))
    return (s,) * k + ((rest,) if rest else ())


def _fill(view: View, sizes: tuple[int, ...]) -> None:
    """Ask what a placement asks, so a patch must carry the indexes along."""
    for s in {*sizes, 1, 2}:
        view.slices(s)
        view.pod_slices(s)
    view.rooms()


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_the_view_chooses_the_racks_the_brute_force_chooses(data: st.DataObject) -> None:
    index = data.draw(fabrics())
    usable = data.draw(rooms(index))
    sizes = data.draw(shapes())
    assert choose_on_view(index, View(usable, index), sizes) == choose_racks(index, usable, sizes)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_a_patched_view_chooses_as_one_built_anew(data: st.DataObject) -> None:
    index = data.draw(fabrics())
    before, after = data.draw(rooms(index)), data.draw(rooms(index))
    sizes = data.draw(shapes())
    old = View(before, index)
    if data.draw(st.booleans()):
        _fill(old, sizes)
    changed = [r for r in after if after[r] != before[r] or data.draw(st.booleans())]
    patched, fresh = old.patched(after, changed), View(after, index)
    assert choose_on_view(index, patched, sizes) == choose_racks(index, after, sizes)
    _fill(patched, sizes)
    assert patched.rooms() == fresh.rooms()
    assert patched.pod_slices(sizes[0]) == fresh.pod_slices(sizes[0])
    assert (patched.total, patched.largest) == (fresh.total, fresh.largest)
    # The view patched from is left as it was: capacities of other cycles share it.
    assert old.rooms() == View(before, index).rooms()
    assert old.pod_slices(1) == View(before, index).pod_slices(1)


def test_one_rack_for_the_whole_job_is_the_tightest_then_the_first() -> None:
    """Rooms 9, 4, 4, 6 (pod p0, p0, p1, p1): 2 slices of 2 go to the first rack of room 4."""
    index = TopologyIndex(
        Topology(
            cluster="c",
            racks=tuple(
                Rack(id=f"r{i}", pod=p, nodes=(f"r{i}-n1",))
                for i, p in enumerate(("p0", "p0", "p1", "p1"))
            ),
        )
    )
    usable = {"r0": 9, "r1": 4, "r2": 4, "r3": 6}
    view = View(usable, index)
    assert choose_on_view(index, view, (2, 2)) == ["r1", "r1"]
    # r1 filled: r2 is now the tightest with 4
    patched = view.patched({"r1": 1}, ["r1"])
    assert choose_on_view(index, patched, (2, 2)) == ["r2", "r2"]
    # 3 slices of 3 fit no one rack but r0 (9)
    assert choose_on_view(index, patched, (3, 3, 3)) == ["r0"] * 3
