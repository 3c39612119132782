"""The prefix rule: what a new run may be named under, and what `cassini clean` may touch."""

from __future__ import annotations

import pytest

from emulation.housekeeping.prefixes import (
    IFNAMSIZ,
    MAX_PREFIX_LEN,
    PROJECT_PREFIXES,
    check_clean_prefix,
    check_prefix,
    new_prefix,
)
from topologies.errors import UserInputError


def test_a_new_prefix_is_ours_unique_and_leaves_room_for_interface_names() -> None:
    made = {new_prefix(base) for base in PROJECT_PREFIXES for _ in range(20)}
    assert len(made) > 20
    for prefix in made:
        assert check_prefix(prefix) == prefix == check_clean_prefix(prefix)
        assert len(prefix) + len("h123") <= IFNAMSIZ


@pytest.mark.parametrize("bad", ["", "ca", "lab1", "cas-1", "cst_a", "cas" + "1" * MAX_PREFIX_LEN])
def test_a_new_run_refuses_a_foreign_odd_or_long_prefix(bad: str) -> None:
    with pytest.raises(UserInputError) as refused:
        check_prefix(bad)
    assert str(refused.value) == (
        f"--prefix {bad!r}: must start with cas or cst (so `cassini clean` finds what a "
        f"crashed run leaves) and be at most {MAX_PREFIX_LEN} letters/digits"
    )


def test_clean_takes_a_long_prefix_of_ours_and_refuses_others() -> None:
    assert check_clean_prefix("cas" + "1" * MAX_PREFIX_LEN)  # it only ever removes ours
    with pytest.raises(UserInputError, match="must start with cas or cst and hold only"):
        check_clean_prefix("eth")
