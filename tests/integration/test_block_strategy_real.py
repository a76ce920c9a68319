"""A job's block strategy on the real servers (MariaDB store, Pulsar bus): jobs added by
`switchyard job add --block ...` fire under a real `switchyard scheduler run`, and a real
executor process (`switchyard executor run --handlers tests.integration.block_handlers`)
applies the strategy to the runs that come while an earlier run of the job still holds:

- discard_later: those runs are recorded failed, naming the strategy, and never reach the
  handler; the runs that reached it never overlap;
- cover_early: the holding run is killed (recorded killed, "covered by" the later run)
  and the later run starts.

The store URL reaches every process through SWITCHYARD_URL, never its arguments."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from tests.integration.procs import cli_json, scheduler_and_executor
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]

BIZ = "blockreal"


def _events(path: Path) -> dict[str, list[str]]:
    """command id -> its events, in order."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        cid, _ms, event = line.split(" ", 2)
        out.setdefault(cid, []).append(event)
    return out


def _spans(path: Path) -> list[tuple[int, int]]:
    """(line number started, line number returned) of each run that reached the handler and returned."""
    started: dict[str, int] = {}
    spans = []
    for n, line in enumerate(path.read_text().splitlines()):
        cid, _ms, event = line.split(" ", 2)
        if event == "started":
            started[cid] = n
        elif cid in started:
            spans.append((started[cid], n))
    return spans


def test_discard_later_and_cover_early_through_the_cli_on_real_servers(tmp_path: Path) -> None:
    events = tmp_path / "events.txt"
    events.touch()
    with scheduler_and_executor(
        tmp_path, BIZ, "tests.integration.block_handlers", concurrency=4, env={"BLOCK_EVENTS": str(events)}
    ) as procs:
        url, logs = procs.url, procs.logs

        def runs(job: str, state: str) -> list[dict[str, Any]]:
            got: list[dict[str, Any]] = cli_json(url, "runs", "--job", f"{BIZ}:{job}", "--limit", "1000")
            return [r for r in got if r["result"] == state]

        # every 2 s, each run holding 5 s: the runs due while one holds are discarded
        added = cli_json(
            url, "job", "add", f"{BIZ}:discard", "--handler", "hold", "--param", "5", "--every", "2s",
            "--block", "discard_later",
        )  # fmt: skip
        assert added["block"] == "discard_later", added
        # every 3 s, each run holding 60 s unless covered: each later run covers the one before
        added = cli_json(
            url, "job", "add", f"{BIZ}:cover", "--handler", "hold", "--param", "60", "--every", "3s",
            "--block", "cover_early",
        )  # fmt: skip
        assert added["block"] == "cover_early", added
        assert cli_json(url, "job", "show", f"{BIZ}:cover")["block"] == "cover_early"

        discarded: list[dict[str, Any]] = []
        killed: list[dict[str, Any]] = []

        def handled() -> bool:  # read from the events file: no process per look
            lines = events.read_text()
            return lines.count("returned cancelled=True") >= 2 and lines.count("returned cancelled=False") >= 2

        def both_applied() -> bool:
            discarded[:] = runs("discard", "failed")
            killed[:] = runs("cover", "killed")
            return len(discarded) >= 2 and len(killed) >= 2

        assert until(handled, 90), logs()
        assert until(both_applied, 60, every_s=0.5), logs()
        cli_json(url, "job", "stop", f"{BIZ}:discard")
        cli_json(url, "job", "stop", f"{BIZ}:cover")

        seen = _events(events)
        for r in discarded:
            assert "block strategy discard_later" in r["message"] and "still in work" in r["message"], r
            assert r["command_id"] not in seen, f"a discarded run reached its handler: {r}"
        for r in killed:
            assert "covered by the run of cover" in r["message"] and "cover_early" in r["message"], r
            # its handler heard the cancel and returned early (it holds 60 s otherwise)
            assert seen[r["command_id"]] == ["started", "returned cancelled=True"], (r, logs())
        # the discard job's runs that reached the handler never overlapped in this process
        discard_ids = {r["command_id"] for r in runs("discard", "succeeded")}
        spans = sorted(
            s for s in _spans(events) if events.read_text().splitlines()[s[0]].split(" ", 1)[0] in discard_ids
        )
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), spans
