"""The election's contract, run on the local election and on the real etcd."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.backends import ELECTION_TTL, election_candidates

KINDS = [pytest.param("local"), pytest.param("etcd", marks=pytest.mark.etcd)]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param


def test_one_leader_at_a_time(kind: str) -> None:
    with election_candidates(kind, 2) as (a, b):
        epoch_a = a.campaign(timedelta(seconds=5))
        assert epoch_a is not None and a.is_leader()
        assert b.campaign(timedelta(milliseconds=500)) is None
        assert not b.is_leader()


def test_resign_hands_over_with_a_higher_epoch(kind: str) -> None:
    with election_candidates(kind, 2) as (a, b):
        epoch_a = a.campaign(timedelta(seconds=5))
        a.resign()
        assert not a.is_leader()
        epoch_b = b.campaign(timedelta(seconds=5))
        assert epoch_a is not None and epoch_b is not None and epoch_b > epoch_a


def test_leadership_is_lost_when_the_lease_expires(kind: str) -> None:
    with election_candidates(kind, 2) as (a, b):
        epoch_a = a.campaign(timedelta(seconds=5))
        assert epoch_a is not None
        # keep-alives continue while the leader lives: it holds past one TTL
        time.sleep(ELECTION_TTL.total_seconds() * 1.5)
        assert a.is_leader()
        started = time.monotonic()
        a.pause_keepalive()  # a hung leader: no keep-alive, no resign
        epoch_b = b.campaign(timedelta(seconds=ELECTION_TTL.total_seconds() * 4))
        took = time.monotonic() - started
        assert epoch_b is not None and epoch_b > epoch_a
        assert took <= ELECTION_TTL.total_seconds() * 3, f"takeover took {took:.1f}s"
        assert not a.is_leader()


def test_epochs_strictly_increase_across_leaders(kind: str) -> None:
    with election_candidates(kind, 3) as cands:
        epochs = []
        for _round in range(2):
            for c in cands:
                e = c.campaign(timedelta(seconds=5))
                assert e is not None
                epochs.append(e)
                c.resign()
        assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs)
