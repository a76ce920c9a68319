"""The switch commands take the zones the way `migrate` does: `--legacy-tz` or the
xxl-job pair `--legacy-db-tz` / `--legacy-cron-tz` (a deployment whose admin JDBC and
JVM zones differ gives the same options to every command). A bad zone is a usage error
naming the option; a split pair for a batch-center business is refused (its contract has
one zone)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from migrator.business import BusinessRegistry
from switchyard import exitcodes
from switchyard.cli import cli
from tests.migration_env import migrated_xxljob

SPLIT = ["--legacy-db-tz", "Asia/Shanghai", "--legacy-cron-tz", "UTC"]


@pytest.mark.parametrize("command", [["cutover"], ["rollback"], ["dualrun", "start"], ["dualrun", "watch-cutover"]])
def test_every_switch_command_offers_the_two_zones(command: list[str]) -> None:
    out = CliRunner().invoke(cli, [*command, "--help"]).output
    assert "--legacy-db-tz" in out and "--legacy-cron-tz" in out and "--legacy-tz" in out


def test_a_split_pair_is_taken_for_an_xxl_job_business(tmp_path: Path) -> None:
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=3)
    legacy = str(env.legacy.url)
    store = str(env.store.engine.url)
    r = CliRunner().invoke(
        cli, ["dualrun", "start", "--business", biz, "--url", store, "--legacy-url", legacy, "--shadow", *SPLIT]
    )
    assert r.exit_code == 0, r.output
    assert BusinessRegistry(env.own).get(biz).state.value == "dual_run"  # type: ignore[union-attr]
    r = CliRunner().invoke(cli, ["rollback", "--business", biz, "--url", store, "--legacy-url", legacy, *SPLIT])
    assert r.exit_code == 0, r.output


def test_an_unknown_zone_names_the_option(tmp_path: Path) -> None:
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=3)
    r = CliRunner().invoke(
        cli,
        [
            "rollback",
            "--business",
            biz,
            "--url",
            str(env.store.engine.url),
            "--legacy-url",
            str(env.legacy.url),
            "--legacy-cron-tz",
            "Nowhere/Zone",
        ],
    )
    assert r.exit_code == exitcodes.USAGE
    assert "--legacy-cron-tz" in r.output and "Nowhere/Zone" in r.output


def test_a_split_pair_is_refused_for_a_batch_center_business(tmp_path: Path) -> None:
    env, _biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=3)
    BusinessRegistry(env.own).ensure("bc-biz", "batch-center")
    r = CliRunner().invoke(
        cli,
        [
            "cutover",
            "--business",
            "bc-biz",
            "--url",
            str(env.store.engine.url),
            "--legacy-url",
            str(env.legacy.url),
            *SPLIT,
        ],
    )
    assert r.exit_code == exitcodes.USAGE
    assert "one zone" in r.output and "--legacy-tz" in r.output
