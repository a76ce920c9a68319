"""`switchyard dualrun check-boundary --business B`: the boundary of the business's latest
cutover checked from its audit row's handover times against both sides' runs, the tally
stored for the report, the overview and the console, and the exit code saying clean or
not (issue 32: the boundary checks were only in the demo's terminal)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import insert

from dualrun.boundary_store import boundary_tallies
from dualrun.testing import fired
from migrator.tables import migrator_tables
from switchyard import exitcodes
from switchyard.cli import cli
from switchyard.wiring import dualrun_store
from tests.compare_cli import patch_reader
from tests.unit.test_dualrun_support import Scenario


def _args(s: Scenario, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "dualrun",
        "check-boundary",
        "--business",
        s.biz_code,
        "--legacy-url",
        "sqlite://",
        "--url",
        f"sqlite:///{tmp_path / 'store.db'}",
        *extra,
    ]


def _cut_over_at(s: Scenario, h: datetime, handover: dict[str, str]) -> None:
    with s.store.engine.begin() as conn:
        conn.execute(
            insert(migrator_tables().audit).values(
                biz_code=s.biz_code,
                from_state="dual_run",
                to_state="cutover",
                at=round(h.timestamp() * 1000),
                actor="ops",
                reason="verdict ready",
                forced=0,
                detail=json.dumps({"handover": handover}),
            )
        )


@pytest.mark.parametrize("doubled", [False, True], ids=["clean", "doubled"])
def test_check_boundary_stores_the_tally_and_exits_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doubled: bool
) -> None:
    # the scenario's hour ends now, as the command's clock reads it
    s = Scenario.create(tmp_path, now=datetime.now(timezone.utc).replace(microsecond=0))
    s.business_row(state="cutover")
    d = s.job("12", "0/10 * * * * ?")
    times = s.times(d)
    h = times[len(times) // 2]
    s.legacy(d, [t for t in s.all_times(d) if t < h])  # legacy fired until the handover
    s.new(d)  # the new side fired every occurrence of the window: before h too (see below)
    s.records[:] = [r for r in s.records if r.scheduled_at >= h]  # ...only from the handover on
    if doubled:
        s.records.append(fired(s.code(d), s.biz_code, 99, times[-30]))  # a second trigger fired one again
    _cut_over_at(s, h, {d.source_key: h.isoformat()})
    patch_reader(monkeypatch, s)
    res = CliRunner().invoke(cli, _args(s, tmp_path, "--json"))
    assert res.exit_code == (exitcodes.FAILED if doubled else exitcodes.OK), res.output
    out = json.loads(res.stdout)
    # up to the command's own horizon (its clock, a moment after the scenario's "now", less
    # the settle): read back, not assumed, or an occurrence due in between miscounts (seen in CI)
    horizon = datetime.fromisoformat(out["horizon"])
    assert s.now - timedelta(minutes=1) <= horizon < s.now
    owned = [t for t in times if h <= t < horizon]
    assert (out["switch"], out["checked"], out["missing"], out["doubled"]) == (
        "cutover",
        len(owned),
        0,
        int(doubled),
    )
    kept = boundary_tallies(dualrun_store(s.store), s.biz_code)[s.biz_code]
    assert [(t.switch, t.checked, t.doubled) for t in kept] == [("cutover", len(owned), int(doubled))]


def test_check_boundary_of_a_business_never_cut_over_or_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Scenario.create(tmp_path, now=datetime.now(timezone.utc).replace(microsecond=0))
    s.business_row(state="dual_run")
    s.job("12", "0/10 * * * * ?")
    patch_reader(monkeypatch, s)
    res = CliRunner().invoke(cli, _args(s, tmp_path))
    assert res.exit_code == exitcodes.FAILED and "never cut over" in res.stderr, res.output
    unknown = CliRunner().invoke(cli, [*_args(s, tmp_path)[:3], "nosuch", *_args(s, tmp_path)[4:]])
    assert unknown.exit_code == exitcodes.USAGE and "no such business: nosuch" in unknown.stderr, unknown.output
    assert boundary_tallies(dualrun_store(s.store)) == {}
