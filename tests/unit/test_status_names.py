"""Issue 27, item 4 (its `status` part): a business named to `status` that does not exist is
an error naming it (exit 2), never an empty answer. `status --check --business <typo>` in
an alert used to print "no businesses yet" and exit 0: an alert that could never fire."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from switchyard import exitcodes
from switchyard.cli import cli
from tests.migration_env import migrated_xxljob, migrated_xxljob_urls


def _status(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["status", *args])
    return res.exit_code, res.output


@pytest.mark.parametrize(
    "extra",
    [("--check",), (), ("--json",), ("--jobs",), ("--check", "--json"), ("--check", "--legacy-url", "LEGACY")],
    ids=["check", "plain", "json", "jobs", "check-json", "check-legacy"],
)
def test_an_unknown_business_is_an_error_naming_it(tmp_path: Path, extra: tuple[str, ...]) -> None:
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=3)
    env.legacy.dispose()
    env.store.engine.dispose()
    url, legacy = migrated_xxljob_urls(tmp_path)[1], migrated_xxljob_urls(tmp_path)[3]
    args = [legacy if a == "LEGACY" else a for a in extra]
    code, out = _status("--url", url, *args, "--business", "nosuch")
    assert code == exitcodes.USAGE, out
    assert "no such business: nosuch" in out and biz in out, out  # named, and what there is instead
    # several names: each unknown one named, the known one not blamed
    code, out = _status("--url", url, *args, "--business", biz, "--business", "nosuch", "--business", "typo")
    assert code == exitcodes.USAGE and "no such business: nosuch, typo" in out, out
    # a business that exists answers as before
    code, out = _status("--url", url, *args, "--business", biz)
    assert code == exitcodes.OK, out
    assert biz in out


def test_an_unknown_business_on_a_store_with_none_is_an_error_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    assert CliRunner().invoke(cli, ["db", "init", "--url", url]).exit_code == 0
    code, out = _status("--url", url, "--check", "--business", "nosuch")
    assert code == exitcodes.USAGE and "no such business: nosuch" in out, out
    assert "no businesses yet" not in out
    code, out = _status("--url", url, "--check")  # nothing named: the empty answer is true
    assert code == exitcodes.OK and "no businesses yet" in out, out
