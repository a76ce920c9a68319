"""Each package owns its tables: the core's are reached from outside scheduler_core only
through the store's port and the core's own modules (scheduler_core.store.reads,
.definitions, .fastpath), the migrator's and dual-run's are defined in their packages
and read or written by their package only (dual-run and the reports read the migrator's
records through dualrun.ports.MigrationRecords, which migrator.records implements), the
packages' stores are built by the composition root (switchyard.wiring) and handed to
them, and `db init` creates every package's tables once."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

from sqlalchemy import create_engine, inspect

from dualrun.ports import MigrationRecords
from dualrun.tables import DualRunTables, dualrun_tables
from migrator.records import MigratorRecords
from migrator.tables import MigratorTables, migrator_tables
from scheduler_core.store.schema import Tables, build_tables
from switchyard.alerts.tables import AlertTables, alert_tables
from switchyard.schema import check_schema, init_schema, package_metadata

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE_CORE = ("migrator", "dualrun", "reports", "switchyard", "readers", "legacy_sim")
CORE_TABLES = {f.name for f in fields(Tables) if f.name not in ("metadata", "partitions", "dialect")}
# the one place that takes the engine from the trigger store: the composition root
ENGINE_FROM_STORE = {"switchyard/wiring.py"}
PACKAGES = ("scheduler_core", *OUTSIDE_CORE)
# each package's table set: its table names, and the fields its store's `.t` names them by
OWNED = {
    "scheduler_core": (build_tables("sqlite").metadata, {f.name for f in fields(Tables)}),
    "migrator": (migrator_tables().metadata, {f.name for f in fields(MigratorTables)}),
    "dualrun": (dualrun_tables().metadata, {f.name for f in fields(DualRunTables)}),
    "switchyard": (alert_tables().metadata, {f.name for f in fields(AlertTables)}),
}
NOT_TABLES = {"metadata", "partitions", "dialect"}
# `db init` gathers every package's table definitions (switchyard.schema); nothing else
# outside a package imports its table module
TABLE_MODULE_IMPORTERS = {"switchyard/schema.py"}


def _sources(packages: tuple[str, ...] = OUTSIDE_CORE) -> list[tuple[str, ast.AST]]:
    out: list[tuple[str, ast.AST]] = []
    for pkg in packages:
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
    assert dual == {"dus_comparison", "dus_boundary_check"}
    alerts = set(alert_tables().metadata.tables)
    assert alerts == {
        "dus_job_alert",
        "dus_alert_incident",
        "dus_alert_event",
        "dus_alert_sent",
        "dus_alert_checkpoint",
    }
    assert not core & mine and not core & dual and not mine & dual and not (core | mine | dual) & alerts
    assert {t for md in package_metadata() for t in md.tables} == mine | dual | alerts


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def foreign_table_uses(rel: str, tree: ast.AST) -> list[str]:
    """Where the module `rel` names a table of a package other than its own: a table name
    in a string (SQL, `table("...")`; docstrings may name them), the `.t.<field>` of
    another package's store, or an import of another package's table module."""
    pkg = rel.split("/", 1)[0]
    names = {t: owner for owner, (md, _) in OWNED.items() for t in md.tables if owner != pkg}
    words = re.compile(r"\b(" + "|".join(sorted(names, key=len, reverse=True)) + r")\b") if names else None
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs and words:
            found += [f"{rel}:{node.lineno}: names {m} ({names[m]}'s)" for m in words.findall(node.value)]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "t":
            owners = [o for o, (_, f) in OWNED.items() if node.attr in f - NOT_TABLES]
            if owners and pkg not in owners:
                found.append(f"{rel}:{node.lineno}: .t.{node.attr} ({owners[0]}'s)")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith(".tables"):
            owner = node.module.split(".", 1)[0]
            if owner in OWNED and owner != pkg and rel not in TABLE_MODULE_IMPORTERS and owner != "scheduler_core":
                found.append(f"{rel}:{node.lineno}: imports {node.module}")
    return found


def test_a_table_is_read_and_written_only_by_its_owning_package() -> None:
    found = [hit for rel, tree in _sources(PACKAGES) for hit in foreign_table_uses(rel, tree)]
    assert not found, "a package reaches into another package's tables:\n" + "\n".join(found)


def test_the_owner_checker_sees_each_kind_of_reach() -> None:
    src = (
        "from migrator.tables import migrator_tables\n"
        "def f(own, conn):\n"
        "    conn.execute(text('SELECT state FROM dus_business'))\n"
        "    return own.t.ledger\n"
    )
    hits = foreign_table_uses("dualrun/x.py", ast.parse(src))
    assert len(hits) == 3, hits
    # the same module in the migrator reads its own tables
    assert foreign_table_uses("migrator/x.py", ast.parse(src)) == []
    # a docstring may name a table
    assert foreign_table_uses("reports/x.py", ast.parse('"""reads dus_cutover_audit via the port"""')) == []


def test_the_packages_stores_are_built_by_the_wiring_only() -> None:
    """MigratorStore / DualRunStore are constructed in switchyard.wiring only: package code
    is handed its store, it never makes one from the trigger store it holds."""
    found = []
    for rel, tree in _sources(PACKAGES):
        for node in ast.walk(tree):
            built = isinstance(node, ast.Call) and _name(node.func) in ("MigratorStore", "DualRunStore")
            if built and isinstance(node, ast.Call) and rel != "switchyard/wiring.py":
                found.append(f"{rel}:{node.lineno}: builds {_name(node.func)}")
            if isinstance(node, ast.Attribute) and node.attr == "beside":
                found.append(f"{rel}:{node.lineno}: .beside")
    assert not found, "\n".join(found)


def test_the_migrators_records_serve_dual_runs_port() -> None:
    """migrator.records implements every read dual-run's MigrationRecords port names (the
    structural match is mypy's at the wiring; this one fails here when a read is added to
    the port and not to the migrator)."""
    wanted = {n for n, v in vars(MigrationRecords).items() if callable(v) and not n.startswith("_")}
    assert wanted and wanted <= set(dir(MigratorRecords)), wanted - set(dir(MigratorRecords))


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
