"""Slurm hostlist expressions: expansion, compression, and the round trip between them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackplane.importers import compress_hostlist, expand_hostlist


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        pytest.param(
            "gb[001-003,007],login1",
            ["gb001", "gb002", "gb003", "gb007", "login1"],
            id="zero padding is kept and a plain name follows the group",
        ),
        pytest.param(
            "r[1-2]n[01-02]",
            ["r1n01", "r1n02", "r2n01", "r2n02"],
            id="two bracket groups expand as a cartesian product, first group slowest",
        ),
        pytest.param("gb[8-10]", ["gb8", "gb9", "gb10"], id="an unpadded range grows a digit"),
        pytest.param(
            "gb[08-10]", ["gb08", "gb09", "gb10"], id="a padded range keeps its lower bound's width"
        ),
        pytest.param("node7", ["node7"], id="a single name is itself"),
        pytest.param("a, b ,c", ["a", "b", "c"], id="spaces around commas are ignored"),
        pytest.param("gb[5,3]", ["gb5", "gb3"], id="numbers keep the order they are written in"),
        pytest.param("[1-3]", ["1", "2", "3"], id="a group with no prefix gives bare numbers"),
        pytest.param("r[1-2]-ib", ["r1-ib", "r2-ib"], id="text may follow a group"),
    ],
)
def test_expanding_a_hostlist_gives_the_names_in_order(expression: str, want: list[str]) -> None:
    assert expand_hostlist(expression) == want


@pytest.mark.parametrize(
    ("expression", "want_message"),
    [
        pytest.param("gb[3-1]", "range 3-1 runs backwards", id="a backwards range"),
        pytest.param("gb[1-3", "unbalanced '['", id="an unclosed bracket"),
        pytest.param("gb1-3]", "unbalanced ']'", id="a stray closing bracket"),
        pytest.param("gb[1[2]]", "nested '['", id="nested brackets"),
        pytest.param("", "empty hostlist", id="an empty expression"),
        pytest.param("   ", "empty hostlist", id="only whitespace"),
        pytest.param("a,,b", "empty name between commas", id="two commas in a row"),
        pytest.param("gb[]", "empty brackets", id="empty brackets"),
        pytest.param("gb[a-c]", "is not a number or a lo-hi range", id="letters in a range"),
        pytest.param("gb[0-99999999]", "longer than 1,000,000 names", id="a runaway range"),
        pytest.param("g b[1-2]", "whitespace inside the name", id="a space inside a name"),
    ],
)
def test_a_bad_hostlist_is_refused_with_a_message_naming_the_problem(
    expression: str, want_message: str
) -> None:
    with pytest.raises(ValueError, match="hostlist") as caught:
        expand_hostlist(expression)
    assert want_message in str(caught.value)


@pytest.mark.parametrize(
    ("names", "want"),
    [
        pytest.param(
            ["gb001", "gb002", "gb003", "gb007", "login1"],
            "gb[001-003,007],login1",
            id="a padded run and a stray number share one group",
        ),
        pytest.param(
            [f"gb-r001-n{n:02d}" for n in range(1, 19)],
            "gb-r001-n[01-18]",
            id="an NVL72 rack folds into one range",
        ),
        pytest.param(["gb9", "gb10", "gb11"], "gb[9-11]", id="unpadded numbers may grow a digit"),
        pytest.param(["gb09", "gb10"], "gb[09-10]", id="padded numbers stay padded"),
        pytest.param(["gb9", "gb010"], "gb9,gb010", id="different paddings do not mix"),
        pytest.param(["b2", "a1", "b3"], "b2,a1,b3", id="order wins over compactness"),
        pytest.param(["login"], "login", id="a name without a number is written as is"),
        pytest.param(["gb5", "gb3"], "gb[5,3]", id="a descending pair stays in its order"),
    ],
)
def test_compressing_names_gives_a_readable_hostlist(names: list[str], want: str) -> None:
    assert compress_hostlist(names) == want
    assert expand_hostlist(want) == names


@pytest.mark.parametrize(
    "names",
    [
        pytest.param([], id="no names"),
        pytest.param([""], id="an empty name"),
        pytest.param(["a,b"], id="a comma"),
        pytest.param(["gb[1]"], id="a bracket"),
        pytest.param(["g b"], id="a space"),
    ],
)
def test_names_that_cannot_be_written_as_a_hostlist_are_refused(names: list[str]) -> None:
    with pytest.raises(ValueError, match="cannot"):
        compress_hostlist(names)


_NAMES = st.lists(
    st.text(alphabet="ab-._0123456789", min_size=1, max_size=8), unique=True, max_size=40
).filter(bool)
_NUMBERED = st.lists(
    st.builds(
        lambda prefix, n, width: f"{prefix}{n:0{width}d}",
        st.sampled_from(["gb", "gb-r1-n", "x", ""]),
        st.integers(min_value=0, max_value=120),
        st.integers(min_value=1, max_value=3),
    ),
    unique=True,
    min_size=1,
    max_size=60,
)


@given(_NAMES)
def test_expanding_a_compressed_list_of_distinct_names_gives_it_back(names: list[str]) -> None:
    assert expand_hostlist(compress_hostlist(names)) == names


@given(_NUMBERED)
def test_numbered_names_survive_the_round_trip_whatever_their_padding(names: list[str]) -> None:
    assert expand_hostlist(compress_hostlist(names)) == names


@given(st.integers(min_value=1, max_value=500), st.integers(min_value=0, max_value=4))
def test_a_consecutive_run_compresses_to_a_single_range(length: int, width: int) -> None:
    names = [f"n{i:0{width}d}" for i in range(1, length + 1)]
    assert compress_hostlist(names).count(",") == 0
