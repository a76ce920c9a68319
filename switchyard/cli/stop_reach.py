"""How an operator's stop reaches the executors, told to the operator: a command that
holds a bus broadcasts it itself; whatever it does, the store has the stop, and the
process holding the bus (the scheduler leader, a shard member, `switchyard serve`)
relays it within a few hundred ms and records that it did. The command waits for that
record (bounded) and says which of the two happened, or warns that nobody relayed it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import click

from scheduler_core.stops import Stop, StopStore

# how long a command waits for a relay's record before it warns (the relays read the
# store every 200-250 ms)
RELAY_WAIT = timedelta(seconds=3)


@dataclass(frozen=True)
class Reach:
    broadcast: bool  # this command put it on the bus itself
    relayed_by: str  # the process that relayed it ("" if none did within RELAY_WAIT)
    relay_ms: int | None  # from the store's write to the relay's record
    # this command's broadcast failed (the broker did not answer; the stop is stored)
    unsent: bool = False

    def as_json(self) -> dict[str, object]:
        return {
            "broadcast": self.broadcast,
            "relayed_by": self.relayed_by,
            "relay_ms": self.relay_ms,
            "broadcast_failed": self.unsent,
        }


def await_relay(
    store: StopStore, stops: Sequence[Stop], broadcast: bool, wait: timedelta = RELAY_WAIT, *, unsent: int = 0
) -> Reach:
    """Wait until every stop's epoch is recorded relayed (or `wait` passes). `unsent`: how
    many of this command's broadcasts failed (`StopService.unsent`)."""
    broadcast = broadcast and not unsent
    if not stops:
        return Reach(broadcast, "", None, bool(unsent))
    deadline = time.monotonic() + wait.total_seconds()
    while True:
        # one read per scope, however many stops the command wrote (a job of 300 triggers)
        now: dict[tuple[object, str], Stop] = {}
        for scope in {s.scope for s in stops}:
            keys = [s.key for s in stops if s.scope is scope]
            now.update({(x.scope, x.key): x for x in store.stops_of(scope, keys)})
        seen = [now.get((s.scope, s.key)) for s in stops]
        done = [s for s, want in zip(seen, stops, strict=True) if s is not None and s.relayed_epoch >= want.epoch]
        if len(done) == len(stops):
            last = max(done, key=lambda s: s.relayed_ms or 0)
            first_write = min(s.updated_ms for s in stops)
            relay_ms = None if last.relayed_ms is None else max(0, last.relayed_ms - first_write)
            return Reach(broadcast, last.relayed_by, relay_ms, bool(unsent))
        if time.monotonic() >= deadline:
            return Reach(broadcast, "", None, bool(unsent))
        time.sleep(0.05)


def tell(reach: Reach) -> None:
    """One line for the operator on how the executors hear of it."""
    if reach.relayed_by:
        via = "broadcast on the bus by this command and " if reach.broadcast else ""
        click.echo(f"  reaches the executors: {via}relayed by {reach.relayed_by} after {reach.relay_ms} ms")
    elif reach.unsent:
        click.echo(
            "  WARNING: stored, but this command's broadcast failed (the broker did not answer) and no process "
            f"holding the bus relayed it within {RELAY_WAIT.total_seconds():.0f} s: a relay carries it once the "
            "broker answers (the broker delivers nothing meanwhile)",
            err=True,
        )
    elif reach.broadcast:
        click.echo(
            "  reaches the executors: broadcast on the bus by this command (no scheduler or serve has relayed it "
            "yet; one does when it runs)"
        )
    else:
        click.echo(
            "  WARNING: stored, but no process holding the bus (scheduler leader, shard member, serve) relayed it "
            f"within {RELAY_WAIT.total_seconds():.0f} s and this command has no bus (--bus): executors still run "
            "what was published until one does. Start the scheduler, or run again with --bus pulsar://...",
            err=True,
        )


__all__ = ["RELAY_WAIT", "Reach", "await_relay", "tell"]
