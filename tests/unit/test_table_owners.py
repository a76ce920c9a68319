"""Each package owns its tables: the core's are reached from outside scheduler_core only
through the store's port and the core's own modules (scheduler_core.store.reads,
.definitions, .fastpath), the migrator's and dual-run's are defined in their packages,
and `db init` creates every package's tables once."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from sqlalchemy import create_engine, inspect

from dualrun.store import MigrationView
from dualrun.tables import dualrun_tables
from migrator.tables import migrator_tables
from scheduler_core.store.schema import Tables, build_tables
from switchyard.schema import check_schema, init_schema, package_metadata

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE_CORE = ("migrator", "dualrun", "reports", "switchyard", "readers", "legacy_sim")
CORE_TABLES = {f.name for f in fields(Tables) if f.name not in ("metadata", "partitions", "dialect")}
# the one place per package that takes the engine from the trigger store (`beside`)
ENGINE_FROM_STORE = {"migrator/store.py", "dualrun/store.py", "switchyard/wiring.py"}


def _sources() -> list[tuple[str, ast.AST]]:
    out: list[tuple[str, ast.AST]] = []
    for pkg in OUTSIDE_CORE:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out.append((path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))))
    return out


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def test_no_package_outside_the_core_touches_the_core_tables() -> None:
    found = []
    for rel, tree in _sources():
        for node in ast.walk(tree):
            # <anything>.t.<a core table>: the concrete store's table set
            if (
                isinstance(node, ast.Attribute)
                and node.attr in CORE_TABLES
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "t"
            ):
                found.append(f"{rel}:{node.lineno}: .t.{node.attr}")
            # <something>store.engine: the trigger store's engine, outside the one seam
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "engine"
                and _name(node.value).endswith("store")
                and rel not in ENGINE_FROM_STORE
                and not _disposes(tree, node)
            ):
                found.append(f"{rel}:{node.lineno}: {_name(node.value)}.engine")
            if isinstance(node, ast.ImportFrom) and node.module == "scheduler_core.store.schema":
                names = {a.name for a in node.names}
                if names & {"Tables", "build_tables"}:
                    found.append(f"{rel}:{node.lineno}: imports the core's table set")
    assert not found, "the core's tables reached from outside scheduler_core:\n" + "\n".join(found)


def _disposes(tree: ast.AST, engine: ast.Attribute) -> bool:
    """`store.engine.dispose()`: closing the pool the composition root opened is no table access."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "dispose" and node.value is engine:
            return True
    return False


def test_the_checker_sees_a_core_table_reached_from_outside() -> None:
    tree = ast.parse("def f(store):\n    with store.engine.connect() as c:\n        return store.t.trigger\n")
    hits = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and (
            (n.attr in CORE_TABLES and isinstance(n.value, ast.Attribute) and n.value.attr == "t")
            or (n.attr == "engine" and _name(n.value).endswith("store") and not _disposes(tree, n))
        )
    ]
    assert len(hits) == 2


def test_the_migrators_and_dual_runs_tables_are_theirs_and_not_the_cores() -> None:
    core = set(build_tables("sqlite").metadata.tables)
    mine = set(migrator_tables().metadata.tables)
    dual = set(dualrun_tables().metadata.tables)
    assert mine == {
        "dus_migration_ledger",
        "dus_stream_checkpoint",
        "dus_business",
        "dus_cutover_audit",
        "dus_legacy_hold",
    }
    assert dual == {"dus_comparison"}
    assert not core & mine and not core & dual and not mine & dual
    assert {t for md in package_metadata() for t in md.tables} == mine | dual


def test_dual_runs_view_of_the_migration_records_names_real_columns() -> None:
    own = migrator_tables()
    for view, table in (
        (MigrationView.business, own.business),
        (MigrationView.ledger, own.ledger),
        (MigrationView.audit, own.audit),
    ):
        assert view.name == table.name
        missing = {c.name for c in view.c} - {c.name for c in table.c}
        assert not missing, f"{view.name}: dual-run reads columns the migrator does not define: {missing}"


def test_db_init_creates_every_packages_tables(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 's.db'}")
    try:
        report = init_schema(engine, 2)
        want = set(build_tables("sqlite").metadata.tables) | {t for md in package_metadata() for t in md.tables}
        assert set(report.created) == want
        assert set(inspect(engine).get_table_names()) == want
        again = check_schema(engine)
        assert again.ok and set(again.tables) == want and not again.missing
    finally:
        engine.dispose()
