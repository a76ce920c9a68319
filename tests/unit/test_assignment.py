"""Rendezvous assignment of partitions to members: deterministic, and a membership change
moves as few partitions as it can (property tests over member sets)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.assignment import assign, moved, owner_of, partitions_of

member_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
member_sets = st.sets(member_ids, min_size=1, max_size=8)


def _bound(partitions: int, share: float) -> float:
    """About `share` of the partitions: the mean plus six standard deviations of a binomial
    (a hash is a fair coin per partition), so a fair hash never fails it by chance."""
    return partitions * share + 6 * math.sqrt(partitions * share * (1 - share)) + 1


@given(member_sets, st.integers(1, 256))
def test_every_partition_has_exactly_one_live_owner_and_the_map_is_deterministic(members, n) -> None:  # type: ignore[no-untyped-def]
    a = assign(members, range(n))
    assert sorted(a) == list(range(n))
    assert set(a.values()) <= members
    # the order members are listed in changes nothing: every process computes the same map
    assert assign(sorted(members, reverse=True), range(n)) == a
    for m in members:
        assert partitions_of(m, members, range(n)) == sorted(p for p, o in a.items() if o == m)


@settings(max_examples=60)
@given(member_sets, member_ids, st.sampled_from([64, 256, 1024]))
def test_a_join_moves_only_what_the_joiner_takes_about_one_in_n(members, joiner, n) -> None:  # type: ignore[no-untyped-def]
    if joiner in members:
        return
    before = assign(members, range(n))
    after = assign(members | {joiner}, range(n))
    changed = moved(before, after)
    assert all(after[p] == joiner for p in changed), "a join only moves partitions to the joiner"
    assert changed == {p for p, o in after.items() if o == joiner}
    assert len(changed) <= _bound(n, 1 / (len(members) + 1))


@settings(max_examples=60)
@given(st.sets(member_ids, min_size=2, max_size=8), st.data(), st.sampled_from([64, 256, 1024]))
def test_a_leave_moves_exactly_the_leavers_partitions(members, data, n) -> None:  # type: ignore[no-untyped-def]
    leaver = data.draw(st.sampled_from(sorted(members)))
    before = assign(members, range(n))
    after = assign(members - {leaver}, range(n))
    changed = moved(before, after)
    assert changed == {p for p, o in before.items() if o == leaver}
    assert len(changed) <= _bound(n, 1 / len(members))


def test_no_member_owns_nothing_and_one_member_owns_everything() -> None:
    assert assign([], range(4)) == {} and owner_of(0, []) is None
    assert set(assign(["solo"], range(16)).values()) == {"solo"}, "one member is the single leader's case"
