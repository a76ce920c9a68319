"""The alerts' tables, as SQLAlchemy Core. Kept apart from the core's job table: alerting is
Switchyard's, not the scheduler's (the core stands alone), and a table of its own is
created on an existing store by `switchyard db init` with no column added to a table
every scheduler reads.

- `dus_job_alert`: a job's targets (a JSON list of `webhook:URL` / `mail:ADDRESS`) and the
  kinds it alerts on, by job code (the key fired records carry);
- `dus_alert_incident`: one per (job, kind) while it lasts: events counted, how many were
  told, when, resolved or not;
- `dus_alert_event`: each event counted once (a failed run's command id; a missed
  occurrence's trigger and time): the de-duplication key, written with its incident's count,
  kept while a scan can read its run again (twice the alerter's lookback);
- `dus_alert_sent`: every message to every target: what, when, to whom, the outcome. A row
  is written `sending` with the incident's count before the send (a restart never sends
  it again), then `delivered` or `error`;
- `dus_alert_checkpoint`: per job, the scheduled time the next scan of its fired records
  starts from."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, PrimaryKeyConstraint, SmallInteger, String, Table

from scheduler_core.store.schema import ID_TYPE, LONG_TEXT


@dataclass(frozen=True)
class AlertTables:
    metadata: MetaData
    job_alert: Table
    incident: Table
    event: Table
    sent: Table
    checkpoint: Table


def alert_tables(md: MetaData | None = None) -> AlertTables:
    md = md if md is not None else MetaData()
    job_alert = Table(
        "dus_job_alert",
        md,
        Column("job_code", String(191), primary_key=True),
        Column("biz_code", String(64), nullable=False),
        Column("targets", LONG_TEXT, nullable=False),  # JSON list
        Column("kinds", String(64), nullable=False),  # comma-separated, scheduler_core.alert_rule.KINDS
        Column("updated_at", BigInteger, nullable=False),
    )
    incident = Table(
        "dus_alert_incident",
        md,
        Column("id", ID_TYPE, primary_key=True, autoincrement=True),
        Column("job_code", String(191), nullable=False),
        Column("biz_code", String(64), nullable=False),
        Column("kind", String(16), nullable=False),
        Column("state", String(16), nullable=False),  # open | resolved | expired
        Column("opened_at", BigInteger, nullable=False),
        Column("last_event_at", BigInteger, nullable=False),  # when its newest event was seen
        Column("first_scheduled_at", BigInteger, nullable=False),
        Column("last_scheduled_at", BigInteger, nullable=False),
        Column("count", Integer, nullable=False),
        Column("sent_count", Integer, nullable=False),  # the count the last message told
        Column("last_sent_at", BigInteger),
        Column("resolved_at", BigInteger),
        Column("resolved_sent", SmallInteger, nullable=False),
        Column("last_message", String(1024), nullable=False),
        Index("idx_alert_incident_job", "job_code", "kind", "state"),
        Index("idx_alert_incident_state", "state"),
    )
    event = Table(
        "dus_alert_event",
        md,
        Column("event_key", String(128), nullable=False),
        Column("kind", String(16), nullable=False),
        Column("incident_id", BigInteger, nullable=False),
        Column("job_code", String(191), nullable=False),
        Column("command_id", String(96)),
        Column("scheduled_at", BigInteger, nullable=False),
        Column("seen_at", BigInteger, nullable=False),
        PrimaryKeyConstraint("event_key", "kind"),
        Index("idx_alert_event_incident", "incident_id"),
        Index("idx_alert_event_time", "scheduled_at"),
    )
    sent = Table(
        "dus_alert_sent",
        md,
        Column("id", ID_TYPE, primary_key=True, autoincrement=True),
        Column("incident_id", BigInteger),  # none: a test alert
        Column("job_code", String(191), nullable=False),
        Column("biz_code", String(64), nullable=False),
        Column("kind", String(16), nullable=False),
        Column("status", String(16), nullable=False),  # firing | resolved | test
        Column("count", Integer, nullable=False),
        Column("target", String(1000), nullable=False),
        Column("at", BigInteger, nullable=False),
        Column("outcome", String(16), nullable=False),  # sending | delivered | error
        Column("attempts", Integer, nullable=False),
        Column("error", String(1024), nullable=False),
        Column("payload", LONG_TEXT, nullable=False),
        Index("idx_alert_sent_at", "at"),
        Index("idx_alert_sent_job", "job_code", "at"),
    )
    checkpoint = Table(
        "dus_alert_checkpoint",
        md,
        Column("job_code", String(191), primary_key=True),
        Column("scan_from", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
    )
    return AlertTables(md, job_alert, incident, event, sent, checkpoint)


__all__ = ["AlertTables", "alert_tables"]
