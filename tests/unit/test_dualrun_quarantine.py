"""Legacy jobs the migrator quarantined: their legacy fires are a known difference
(labelled not_migrated, never missing on the new side), and never hidden either."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import insert

from dualrun.model import Label, MismatchKind, Verdict, as_dict, comparison_from_dict
from dualrun.verdict_store import latest, put_comparison
from migrator.tables import migrator_tables
from readers.records import LegacyDefinition
from reports.load import load_report
from reports.write import render_report
from switchyard.wiring import dualrun_store
from tests.unit.test_dualrun_support import Scenario

REASON = "executor route strategy 'CONSISTENT_HASH_X' has no equivalent"


def quarantine(
    s: Scenario, key: str, cron: str, *, status: str = "quarantined", field: str = "route", reason: str = REASON
) -> LegacyDefinition:
    """A legacy job the ledger says was not migrated (no target job), still firing on legacy."""
    from dualrun.testing import cron_definition

    d = cron_definition(key, s.biz_code, cron, source=s.source)
    s.defs.append(d)
    with s.store.engine.begin() as conn:
        conn.execute(
            insert(migrator_tables().ledger).values(
                source_system=s.source.value,
                source_key=key,
                business=s.biz_code,
                status=status,
                content_hash="q",
                target_job_code=None,
                field=field if status == "quarantined" else None,
                reason=reason if status == "quarantined" else None,
                updated_at=0,
            )
        )
    return d


def _scenario(tmp_path: Path) -> tuple[Scenario, LegacyDefinition, LegacyDefinition]:
    s = Scenario.create(tmp_path)
    s.business_row(state="dual_run")
    migrated = s.job("12", "0/10 * * * * ?")
    s.legacy(migrated)
    s.new(migrated)
    held = quarantine(s, "13", "0/20 * * * * ?")
    s.legacy(held)  # runs on legacy only: it was never handed over
    return s, migrated, held


def test_quarantined_job_fires_are_labelled_not_missing_and_the_verdict_says_so(tmp_path: Path) -> None:
    s, _, _ = _scenario(tmp_path)
    c = s.compare()
    # Then the quarantined job's 180 legacy fires are labelled, none flagged, and it is ready
    assert c.verdict is Verdict.READY, c.reasons
    assert c.mismatch_counts["missing_on_new"] == {"total": 180, "flagged": 0, "labelled": 180}
    held = [m for m in c.mismatches if m.kind is MismatchKind.MISSING_ON_NEW]
    assert held and all(m.label is Label.NOT_MIGRATED and not m.flagged for m in held)
    assert all(m.detail == f"not migrated (quarantined: route: {REASON})" for m in held)
    assert all(m.job_code == "xxl:reminder:13" for m in held)
    g = next(g for g in c.mismatch_groups if g.label is Label.NOT_MIGRATED)
    assert (g.count, g.job_code, g.detail) == (180, "xxl:reminder:13", f"not migrated (quarantined: route: {REASON})")
    # the quarantined job, its reason and its fires are listed; the verdict's sentence names them
    assert [(q.source_key, q.field, q.reason, q.legacy_fires) for q in c.quarantined] == [("13", "route", REASON, 180)]
    sentence = "1 legacy job(s) of this business are quarantined and still run only on legacy; fix them before cutover"
    assert any(w.startswith(sentence) for w in c.warnings), c.warnings
    assert c.summary.startswith("ready; " + sentence)
    check = next(ch for ch in c.checks if ch.code == "quarantined")
    assert check.passed and check.warning and "180 legacy fire(s)" in check.sentence
    assert check.details[0].startswith(f"13 (xxl:reminder:13): not migrated (quarantined: route: {REASON})")
    # neither the volume check nor the new side's expected fires count what was never handed over
    assert c.new.missing == 0 and c.new.expected == 360 and c.legacy.expected == 540
    volume = next(ch for ch in c.checks if ch.code == "volume")
    assert volume.passed and "not counting 180 legacy call(s) of quarantined (not migrated) jobs" in volume.sentence
    assert c.reference_fires == 360
    assert any("labelled not_migrated" in n for n in c.notes)
    # the JSON form round-trips it
    back = comparison_from_dict(json.loads(json.dumps(as_dict(c))))
    assert back.quarantined == c.quarantined and back.warnings == c.warnings


def test_a_migrated_job_with_missing_fires_is_still_missing_beside_a_quarantined_one(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    migrated = s.job("12", "0/10 * * * * ?")
    s.legacy(migrated)
    times = s.times(migrated)
    dropped = times[5::30]
    s.new(migrated, [t for t in times if t not in dropped])
    held = quarantine(s, "13", "0/20 * * * * ?")
    s.legacy(held)
    c = s.compare()
    assert c.verdict is Verdict.NOT_READY
    counts = c.mismatch_counts["missing_on_new"]
    assert counts["flagged"] == len(dropped) and counts["labelled"] == 180
    flagged = sorted(m.scheduled_at for m in c.mismatches if m.kind is MismatchKind.MISSING_ON_NEW and m.flagged)
    assert flagged == dropped
    assert all(m.job_code == "xxl:reminder:12" for m in c.mismatches if m.flagged)
    # the rate is of the handed-over job only: the quarantined fires do not dilute it
    assert c.reasons[0].startswith(f"{len(dropped)} missing fires on the new side of 360 ")
    assert c.new.missing == len(dropped)


def test_a_job_migrated_then_deleted_is_not_taken_for_quarantined(tmp_path: Path) -> None:
    # a migrated job, later deleted at the source (ledger: deleted), whose legacy rows are
    # still in the log while the new side does not fire it: those fires stay missing
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d)
    gone = quarantine(s, "14", "0/20 * * * * ?", status="deleted")
    s.legacy(gone)
    c = s.compare()
    assert c.verdict is Verdict.NOT_READY
    assert c.quarantined == () and c.warnings == ()
    assert c.mismatch_counts["missing_on_new"]["flagged"] == 180
    assert not any(m.label is Label.NOT_MIGRATED for m in c.mismatches)


def test_reports_show_the_quarantined_jobs_separately(tmp_path: Path) -> None:
    s, _, _ = _scenario(tmp_path)
    c = s.compare()
    put_comparison(dualrun_store(s.store), c)
    stored = latest(dualrun_store(s.store), "reminder")
    assert stored is not None and stored.is_ready and stored.reasons == ()
    assert stored.warnings and stored.warnings[0].startswith("1 legacy job(s) of this business are quarantined")
    content = load_report(dualrun_store(s.store), "reminder", now=s.now).content()
    md = render_report(content, "md")
    assert "## Not migrated (quarantined)" in md
    assert (
        "1 legacy job(s) of this business are quarantined and still run only on legacy; fix them before cutover" in md
    )
    assert f"| 13 | xxl:reminder:13 | route | {REASON} | 180 |" in md
    html = render_report(content, "html")
    assert 'id="quarantined"' in html and "fix them before cutover" in html and "CONSISTENT_HASH_X" in html
    data = json.loads(render_report(content, "json"))
    assert data["quarantined"][0]["source_key"] == "13" and data["quarantined"][0]["legacy_fires"] == 180
    assert data["warnings"] and data["verdict"] == "ready"


def test_overview_and_cli_text_carry_the_quarantine_warning(tmp_path: Path) -> None:
    from reports.load import load_overview
    from switchyard.cli.dualrun import render_text

    s, _, _ = _scenario(tmp_path)
    c = s.compare()
    cid = put_comparison(dualrun_store(s.store), c)
    text = render_text(c, cid)
    assert "READY" in text and "  ! 1 legacy job(s) of this business are quarantined" in text
    row = load_overview(dualrun_store(s.store), now=s.now).content()["rows"][0]
    assert row["verdict"] == "ready" and row["warnings"][0].startswith("1 legacy job(s)")
    ov = load_overview(dualrun_store(s.store), now=s.now).content()
    assert "quarantined and still run only on legacy" in render_report(ov, "md")
    assert 'class="warn"' in render_report(ov, "html")
