"""Stored comparisons: the latest verdict is what the cutover gate reads."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select

from dualrun.model import Verdict, as_dict, comparison_from_dict
from dualrun.settings import Thresholds, parse_duration, thresholds_from_mapping
from dualrun.tables import dualrun_tables
from dualrun.verdict_store import history, latest, latest_by_business, load_comparison, put_comparison
from switchyard.wiring import dualrun_store
from tests.unit.test_dualrun_support import Scenario, identical


def test_stored_comparison_is_the_latest_verdict_with_its_age(tmp_path: Path) -> None:
    s, _d = identical(tmp_path)
    assert latest(dualrun_store(s.store), "reminder") is None
    ready = s.compare()
    first = put_comparison(dualrun_store(s.store), ready)
    later = replace(ready, computed_at=ready.computed_at + timedelta(minutes=5))
    s.store.put_fired([])  # nothing changes on the store side
    not_ready = replace(later, verdict=Verdict.NOT_READY)
    second = put_comparison(dualrun_store(s.store), not_ready)
    v = latest(dualrun_store(s.store), "reminder")
    assert v is not None and v.comparison_id == second > first
    assert v.verdict is Verdict.NOT_READY and not v.is_ready
    assert v.age(ready.computed_at + timedelta(minutes=15)) == timedelta(minutes=10)
    assert v.is_fresh(ready.computed_at + timedelta(minutes=15), timedelta(minutes=30))
    assert not v.is_fresh(ready.computed_at + timedelta(hours=2), timedelta(minutes=30))
    assert v.window == ready.window
    assert latest(dualrun_store(s.store), "other") is None
    assert set(latest_by_business(dualrun_store(s.store))) == {"reminder"}


def test_row_columns_and_body_carry_the_full_comparison(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, s.times(d)[3:])
    c = s.compare()
    cid = put_comparison(dualrun_store(s.store), c)
    t = dualrun_tables().comparison
    with s.store.engine.connect() as conn:
        row = conn.execute(select(t).where(t.c.id == cid)).one()
    assert row.verdict == "not_ready" and row.biz_code == "reminder"
    assert json.loads(row.reasons) == list(c.reasons)
    body = json.loads(row.body)
    assert body["verdict"] == "not_ready" and body["measures"]["new"]["fires"] == 357
    assert len(body["mismatches"]) == 3
    again = load_comparison(dualrun_store(s.store), cid)
    assert again is not None and as_dict(again) == as_dict(c)
    assert [h.computed_at for h in history(dualrun_store(s.store), "reminder")] == [c.computed_at]


def test_json_body_round_trips(tmp_path: Path) -> None:
    s, _ = identical(tmp_path)
    c = s.compare()
    assert as_dict(comparison_from_dict(json.loads(json.dumps(as_dict(c))))) == as_dict(c)


def test_thresholds_from_toml_mapping_layer_defaults_and_business() -> None:
    data = {"defaults": {"lag_p99_limit": "2s", "rel": 0.3}, "business": {"reminder": {"missing_abs": 0.01}}}
    t = thresholds_from_mapping(data, "reminder")
    assert t.lag_p99_limit == timedelta(seconds=2) and t.rel == 0.3 and t.missing_abs == 0.01
    assert thresholds_from_mapping(data, "other").missing_abs == Thresholds().missing_abs
    try:
        thresholds_from_mapping({"defaults": {"nope": 1}}, "x")
    except ValueError as exc:
        assert "unknown threshold 'nope'" in str(exc)
    else:
        raise AssertionError("an unknown threshold must be refused")


def test_parse_duration() -> None:
    assert parse_duration("500ms") == timedelta(milliseconds=500)
    assert parse_duration("1m") == timedelta(minutes=1)
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("2") == timedelta(seconds=2)
