"""Which member owns which partition: rendezvous (highest random weight) hashing.

Every member computes the same map from the same member set, with no coordinator: a
partition goes to the member whose hash of (member, partition) is highest. When a member
joins, only the partitions it now wins move (to it, about 1/N of them); when one leaves,
exactly its partitions move, each to the member that was second for it. Nothing else
moves, so a change of membership costs as few handoffs as it can.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable


def weight(member: str, partition: int) -> int:
    """A stable 64-bit weight (the same in every process: not Python's salted hash())."""
    digest = hashlib.blake2b(f"{member}\x00{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_of(partition: int, members: Collection[str]) -> str | None:
    """The member that owns `partition`, None when there is no member. A tie (a 64-bit
    collision) goes to the smaller member id, so the rule stays total."""
    best: tuple[int, str] | None = None
    for m in members:
        key = (weight(m, partition), m)
        if best is None or key[0] > best[0] or (key[0] == best[0] and key[1] < best[1]):
            best = key
    return None if best is None else best[1]


def assign(members: Collection[str], partitions: Iterable[int]) -> dict[int, str]:
    """partition -> owner for every partition; {} when there is no member."""
    live = sorted(set(members))
    if not live:
        return {}
    out: dict[int, str] = {}
    for p in partitions:
        owner = owner_of(p, live)
        assert owner is not None
        out[p] = owner
    return out


def partitions_of(member: str, members: Collection[str], partitions: Iterable[int]) -> list[int]:
    """The partitions `member` owns among `members` (it need not be one of them yet)."""
    live = set(members) | {member}
    return sorted(p for p, m in assign(live, partitions).items() if m == member)


def moved(before: dict[int, str], after: dict[int, str]) -> set[int]:
    """Partitions whose owner differs between two assignments."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
