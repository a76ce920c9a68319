"""Issue 28: `switchyard job ...` and `switchyard runs` through click on SQLite: a job made
here is a job everywhere (list, show, status, status --check, the console's businesses),
bad input is exit 2 naming the field, an unknown job or business is exit 2 naming it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from migrator.business import BusinessRegistry
from scheduler_core.cron import CronExpression
from scheduler_core.model import FiredRecord, FiredState, JobCode, command_id
from switchyard import exitcodes
from switchyard.cli import cli
from switchyard.wiring import migrator_store, open_existing_store


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    u = f"sqlite:///{tmp_path / 'center.db'}"
    assert CliRunner().invoke(cli, ["db", "init", "--url", u]).exit_code == 0
    monkeypatch.setenv("SWITCHYARD_URL", u)  # every command below finds the store by it
    return u


def sy(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.output


def sy_json(*args: str) -> Any:
    code, out = sy(*args, "--json")
    assert code == 0, out
    return json.loads(out)


def _add(code: str, *extra: str) -> dict[str, Any]:
    return sy_json("job", "add", code, "--handler", "h", *extra)  # type: ignore[no-any-return]


def test_add_list_show_a_cron_job_with_its_first_fire_computed(url: str) -> None:
    before = datetime.now(UTC)
    job = _add("billing:invoice", "--cron", "0 0/5 * * * ?", "--zone", "Asia/Shanghai", "--param", "p=1")
    assert job["business"] == "billing" and job["job"] == "invoice" and job["state"] == "running"
    expected = CronExpression("0 0/5 * * * ?", "Asia/Shanghai").next_after(before)
    assert expected is not None
    assert datetime.fromisoformat(job["next_fire_at"]) == expected
    assert job["schedule"] == {
        "kind": "cron",
        "cron": "0 0/5 * * * ?",
        "dialect": "2.5",
        "zone": "Asia/Shanghai",
        "every_s": None,
        "at": None,
        "end_at": None,
        "misfire": "fire_once_now",
    }
    _add("reports", "--business", "billing", "--every", "90s", "--item", "a", "--item", "b", "--timeout", "2m")
    listed = sy_json("job", "list")
    assert [(j["business"], j["job"]) for j in listed] == [("billing", "invoice"), ("billing", "reports")]
    for n in (10, 9, 100):
        _add(f"billing:k{n}", "--every", "1m")
    numbered = [j["job"] for j in sy_json("job", "list") if j["job"].startswith("k")]
    assert numbered == ["k9", "k10", "k100"]  # numbers sorted as numbers
    shown = sy_json("job", "show", "billing:reports")
    assert shown["shards"] == 2 and shown["items"] == ["a", "b"] and shown["timeout_s"] == 120
    assert shown["schedule"]["every_s"] == 90
    # the next 5 fire times previewed in the job's zone
    assert sy_json("job", "show", "invoice")["next_fires"] == [
        (expected + timedelta(minutes=5 * i)).isoformat() for i in range(5)
    ]
    code, out = sy("job", "show", "invoice")
    assert code == 0 and "billing:invoice  running" in out and "cron 0 0/5 * * * ? (Asia/Shanghai" in out


def test_a_native_business_shows_in_status_and_the_console(url: str) -> None:
    code, out = sy("status")
    assert "no businesses yet" in out
    _add("billing:invoice", "--cron", "0 0 * * * ?")
    code, out = sy("status")
    assert code == 0 and "billing" in out and "native" in out and "new 1" in out, out
    rows = sy_json("status", "--jobs")
    (row,) = rows
    assert row["business"] == "billing" and row["source"] == "native" and row["sides"]["new"] == 1
    assert [j["job_code"] for j in row["jobs"]] == ["invoice"]
    code, out = sy("status", "--check")
    assert code == 0, out
    # a native job meant to run but firing nowhere is what --check exists for
    store = open_existing_store(url)
    try:
        (t,) = store.triggers_of(job_code=JobCode("invoice"))
        from scheduler_core.model import TriggerState
        from scheduler_core.ports import Transition

        assert t.id is not None
        store.cas(Transition(ids=[t.id], from_state=TriggerState.WAITING, to_state=TriggerState.CREATED))
    finally:
        store.engine.dispose()
    code, out = sy("status", "--check")
    assert code == exitcodes.FAILED and "orphaned" in out, out

    from switchyard.console import data

    store = open_existing_store(url)
    src = data.Sources(store=store)
    try:
        names = [b["business"] for b in data.businesses(src)]
    finally:
        store.engine.dispose()
    assert names == ["billing"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--cron", "0 61 * * * ?"), "cron:"),
        (("--cron", "0 * * * * ?", "--zone", "Mars/Olympus"), "zone:"),
        (("--every", "soon"), "every:"),
        (("--every", "10ms"), "every:"),
        (("--at", "2001-01-01T00:00:00+00:00"), "at: 2001-01-01T00:00:00+00:00 is in the past"),
        (("--at", "2099-01-01T00:00:00"), "at:"),
        (("--cron", "0 * * * * ?", "--every", "1m"), "schedule: give one of"),
        ((), "schedule: give one of"),
        (("--cron", "0 * * * * ?", "--priority", "10"), "priority: must be 1..9"),
        (("--cron", "0 * * * * ?", "--retries", "-1"), "retries:"),
        (("--cron", "0 * * * * ?", "--shards", "0"), "shards:"),
        (("--cron", "0 * * * * ?", "--child", "nosuch"), "child: no such job: nosuch"),
        (("--cron", "0 0 0 1 1 ? 2001"), "cron:"),
        (("--cron", "0 * * * * ?", "--timeout", "0s"), "timeout:"),
    ],
)
def test_bad_input_is_exit_2_naming_the_field(url: str, args: tuple[str, ...], field: str) -> None:
    code, out = sy("job", "add", "billing:j", "--handler", "h", *args)
    assert code == exitcodes.USAGE, out
    assert f"bad input: {field}" in out, out
    assert "Traceback" not in out
    assert sy_json("job", "list") == []  # nothing half-written


def test_unknown_names_and_duplicates_are_exit_2_naming_them(url: str) -> None:
    _add("billing:invoice", "--cron", "0 0 * * * ?")
    for args, said in [
        (("job", "show", "nosuch"), "no such job: nosuch"),
        (("job", "stop", "billing:nosuch"), "no such job: billing:nosuch"),
        (("job", "show", "other:invoice"), "job invoice is of business billing, not other"),
        (("job", "show", "invoice", "--business", "other"), "job invoice is of business billing, not other"),
        (("job", "list", "--business", "nosuch"), "no such business: nosuch"),
        (("runs", "--business", "nosuch"), "no such business: nosuch"),
        (("runs", "--job", "nosuch"), "no such job: nosuch"),
        (("job", "add", "billing:invoice", "--handler", "h", "--every", "1m"), "job: invoice exists already"),
        (("job", "edit", "invoice"), "nothing to change"),
        (("job", "run", "invoice", "--param", "x"), "param: a run with its own parameter is published by this command"),
        (("job", "add", "bad code", "--business", "b", "--handler", "h", "--every", "1m"), "job: 'bad code'"),
    ]:
        code, out = sy(*args)
        assert code == exitcodes.USAGE and said in out, (args, out)


def test_edit_copy_run_stop_start_delete(url: str) -> None:
    _add("billing:invoice", "--cron", "0 0 * * * ?")
    edited = sy_json("job", "edit", "billing:invoice", "--cron", "0 30 * * * ?", "--retries", "2", "--param", "x")
    assert edited["schedule"]["cron"] == "0 30 * * * ?" and edited["retries"] == 2 and edited["params"] == "x"
    assert datetime.fromisoformat(edited["next_fire_at"]).minute == 30
    assert "schedule changed" in edited["note"]
    edited = sy_json("job", "edit", "invoice", "--misfire", "skip")
    assert edited["schedule"]["misfire"] == "skip" and edited["schedule"]["cron"] == "0 30 * * * ?"
    copied = sy_json("job", "copy", "invoice", "invoice2")
    assert copied["state"] == "stopped" and copied["params"] == "x" and copied["schedule"]["cron"] == "0 30 * * * ?"
    ran = sy_json("job", "run", "invoice")
    assert abs(datetime.fromisoformat(ran["at"]) - datetime.now(UTC)) < timedelta(seconds=10)
    stopped = sy_json("job", "stop", "invoice")
    assert stopped["changed"] and stopped["action"] == "stop"
    assert sy_json("job", "show", "invoice")["state"] == "stopped"
    started = sy_json("job", "start", "invoice2")
    assert started["changed"]
    assert sy_json("job", "show", "invoice2")["state"] == "running"
    deleted = sy_json("job", "delete", "invoice2")
    assert deleted["changed"]
    assert [j["job"] for j in sy_json("job", "list")] == ["invoice"]
    store = open_existing_store(url)
    try:
        actions = [e.reason for e in BusinessRegistry(migrator_store(store)).audit("billing")]
    finally:
        store.engine.dispose()
    for action in ("job add", "job edit", "job run", "job stop", "job start", "job delete"):
        assert action in actions, actions


def test_runs_lists_the_fired_records_newest_first_with_lag_and_filters(url: str) -> None:
    _add("billing:invoice", "--cron", "0 0 * * * ?")
    _add("billing:other", "--every", "1m")
    store = open_existing_store(url)
    now = datetime.now(UTC).replace(microsecond=0)
    try:
        (t,) = store.triggers_of(job_code=JobCode("invoice"))
        (o,) = store.triggers_of(job_code=JobCode("other"))
        assert t.id is not None and o.id is not None
        recs = [
            FiredRecord(
                command_id=command_id(t.id, now - timedelta(minutes=m), 0),
                trigger_id=t.id,
                job_code=JobCode("invoice"),
                biz_code="billing",
                scheduled_at=now - timedelta(minutes=m),
                state=FiredState.PENDING,
            )
            for m in (1, 2, 300)
        ] + [
            FiredRecord(
                command_id=command_id(o.id, now, 0),
                trigger_id=o.id,
                job_code=JobCode("other"),
                biz_code="billing",
                scheduled_at=now,
            )
        ]
        store.put_fired(recs)
        from scheduler_core.ports import FiredUpdate

        done = recs[0].command_id
        began = now - timedelta(seconds=59)  # 1 s after its scheduled time
        store.update_fired(
            [
                FiredUpdate(
                    done,
                    FiredState.FAILED,
                    at=now - timedelta(seconds=58),
                    message="boom",
                    received_at=began,
                    started_at=began,
                )
            ]
        )
    finally:
        store.engine.dispose()
    rows = sy_json("runs", "--job", "billing:invoice")
    assert [r["scheduled_at"][:19] for r in rows] == [
        (now - timedelta(minutes=m)).astimezone().isoformat()[:19] for m in (1, 2)
    ]  # newest first; the one 5 h ago is outside the default 2 h
    first = rows[0]
    assert first["result"] == "failed" and first["message"] == "boom" and first["lag_ms"] == 1000
    assert first["finished_at"] is not None
    assert len(sy_json("runs", "--business", "billing", "--since", "6h")) == 4
    assert [r["job"] for r in sy_json("runs", "--state", "failed")] == ["invoice"]
    assert len(sy_json("runs", "--limit", "1")) == 1
    # paging: the next page is before the last row's time
    page1 = sy_json("runs", "--since", "6h", "--limit", "2")
    page2 = sy_json("runs", "--since", "6h", "--limit", "2", "--before", page1[-1]["scheduled_at"])
    assert [r["command_id"] for r in page1 + page2] == [r["command_id"] for r in sy_json("runs", "--since", "6h")]
    code, out = sy("runs", "--job", "invoice")
    assert code == 0 and "billing:invoice" in out and "failed" in out and "boom" in out
    code, out = sy("runs", "--since", "soon")
    assert code == exitcodes.USAGE and "since" in out


def test_every_job_option_has_help(url: str) -> None:
    from switchyard.cli.job import job
    from switchyard.cli.runs import runs

    missing = []
    for cmd in [*job.commands.values(), runs]:  # type: ignore[attr-defined]
        assert cmd.help or cmd.callback.__doc__, cmd.name
        for p in cmd.params:
            if p.param_type_name == "option" and not getattr(p, "help", None):
                missing.append(f"{cmd.name} {p.opts}")
    assert not missing, missing


def test_a_migrated_job_is_listed_and_the_legacy_admin_keeps_it_until_the_cutover(tmp_path: Path) -> None:
    from tests.migration_env import migrated_xxljob, migrated_xxljob_urls

    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=3)
    env.legacy.dispose()
    env.store.engine.dispose()
    store_url = migrated_xxljob_urls(tmp_path)[1]
    listed = sy_json("job", "list", "--url", store_url, "--business", biz)
    assert listed and all(j["business"] == biz for j in listed)
    code_ = listed[0]["job"]  # a migrated code has colons of its own (xxl:<biz>:<key>)
    assert sy_json("job", "show", code_, "--url", store_url)["job"] == code_
    for args in (("edit", code_, "--retries", "1"), ("delete", code_)):
        code, out = sy("job", *args, "--url", store_url)
        assert code == exitcodes.REFUSED and "legacy admin" in out, out
    # a job created here beside it is the new center's own
    added = sy_json("job", "add", "native1", "--business", biz, "--handler", "h", "--every", "1m", "--url", store_url)
    assert added["state"] == "running"
    edited = sy_json("job", "edit", "native1", "--retries", "3", "--url", store_url)
    assert edited["retries"] == 3
    rows = sy_json("status", "--jobs", "--url", store_url, "--business", biz)
    assert "native1" in [j["job_code"] for j in rows[0]["jobs"]]
    # stopped and started again in a business still on legacy: it has no legacy twin to fire
    # beside, so the resume guard (which refuses a migrated job's resume here) lets it run
    assert sy_json("job", "stop", "native1", "--url", store_url)["changed"]
    assert sy_json("job", "show", "native1", "--url", store_url)["state"] == "stopped"
    assert sy_json("job", "start", "native1", "--url", store_url)["changed"]
    assert sy_json("job", "show", "native1", "--url", store_url)["state"] == "running"
    code, out = sy("job", "start", code_, "--url", store_url)
    assert code == exitcodes.REFUSED and "on legacy" in out, out  # a migrated job's resume here stays refused


def test_a_native_business_s_triggers_pause_and_resume_without_a_reason(url: str) -> None:
    """A business made here is cut over from its first job and has no legacy job: pausing
    its triggers (`trigger pause --business`, as an operator stops a whole business for
    the night) is a plain stop, not the "firing on neither side" refusal a migrated job
    gets, which named a legacy job that never existed."""
    for n in range(2):
        _add(f"nightly:j{n}", "--every", "1m")
    code, out = sy("trigger", "pause", "--business", "nightly")
    assert code == 0 and "refused" not in out, out
    assert {j["state"] for j in sy_json("job", "list", "--business", "nightly")} == {"stopped"}
    code, out = sy("trigger", "resume", "--business", "nightly")
    assert code == 0, out
    assert {j["state"] for j in sy_json("job", "list", "--business", "nightly")} == {"running"}
    audit = [e.reason for e in BusinessRegistry(migrator_store(open_existing_store(url))).audit("nightly")]
    assert "trigger pause" in audit and "trigger resume" in audit  # still audited


def test_trigger_and_run_kill_take_a_job_as_business_job_as_the_job_commands_do(url: str) -> None:
    """`job show shop:clean` worked and `trigger pause --job shop:clean` said "no such job":
    every command that takes a job reads its code or business:job alike."""
    _add("shop:clean", "--every", "1m")
    code, out = sy("trigger", "pause", "--job", "shop:clean")
    assert code == 0, out
    assert sy_json("job", "show", "shop:clean")["state"] == "stopped"
    code, out = sy("trigger", "resume", "--job", "shop:clean")
    assert code == 0, out
    assert sy_json("job", "show", "clean")["state"] == "running"
    code, out = sy("trigger", "pause", "--job", "depot:clean")
    assert code == exitcodes.USAGE and "job clean is of business shop, not depot" in out, out
    code, out = sy("run", "kill", "--job", "shop:clean")
    assert code == 0 and "nothing to kill" in out, out
    code, out = sy("run", "kill", "--job", "shop:nosuch")
    assert code == exitcodes.USAGE and "no such job: shop:nosuch" in out, out


def test_a_switch_or_a_comparison_of_a_native_business_says_it_has_no_legacy_side(url: str, tmp_path: Path) -> None:
    """rollback / cutover / dualrun start / dualrun compare of a business made here: exit 2
    saying it has no legacy side (it said "unknown source system 'native'"), nothing changed."""
    _add("shop:clean", "--every", "1m")
    legacy = f"sqlite:///{tmp_path / 'center.db'}"  # any existing database: it is never read
    for args in (("rollback",), ("cutover",), ("dualrun", "start"), ("dualrun", "compare")):
        code, out = sy(*args, "--business", "shop", "--legacy-url", legacy)
        assert code == exitcodes.USAGE and "shop was created in this center (native)" in out, (args, out)
    # without a legacy database named at all: the same answer, not "--legacy-url missing"
    code, out = sy("rollback", "--business", "shop")
    assert code == exitcodes.USAGE and "shop was created in this center (native)" in out, out
    assert sy_json("job", "show", "shop:clean")["state"] == "running"
    assert [r.state.value for r in BusinessRegistry(migrator_store(open_existing_store(url))).all()] == ["cutover"]


def test_a_switch_of_a_migrated_business_without_its_legacy_database_names_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.migration_env import migrated_xxljob, migrated_xxljob_urls

    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=2)
    env.legacy.dispose()
    env.store.engine.dispose()
    monkeypatch.delenv("SWITCHYARD_LEGACY_URL", raising=False)
    store_url = migrated_xxljob_urls(tmp_path)[1]
    for args in (("dualrun", "start"), ("cutover",), ("rollback",)):
        code, out = sy(*args, "--business", biz, "--url", store_url)
        assert code == exitcodes.USAGE and f"{biz}: its legacy database is needed: give --legacy-url" in out, out
