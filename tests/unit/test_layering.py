"""The dependency rule as a test: scheduler_core imports none of the other packages."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OTHERS = {"readers", "migrator", "dualrun", "reports", "switchyard"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_scheduler_core_stands_alone() -> None:
    offenders = {
        str(p.relative_to(REPO)): sorted(_imports(p) & OTHERS) for p in (REPO / "scheduler_core").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_readers_know_nothing_of_ours() -> None:
    bad = {
        str(p.relative_to(REPO)): sorted(_imports(p) & (OTHERS | {"scheduler_core"}) - {"readers"})
        for p in (REPO / "readers").rglob("*.py")
    }
    assert {k: v for k, v in bad.items() if v} == {}


# The modules outside the core that still name the store's implementation: the
# composition root, the demo and the benches build it; the others build store-side
# services from it (the migrator's writer, the job service, the CLI commands
# and console sources that open a store). Every other module types against the ports
# (scheduler_core.ports): this list only shrinks.
CONCRETE_STORE_ALLOWED = {
    "switchyard/wiring.py",
    "switchyard/embedded.py",
    "switchyard/demo.py",
    "switchyard/jobs.py",
    "switchyard/cli/scheduler.py",
    "switchyard/cli/alerts.py",
    "switchyard/console/data.py",
    "migrator/target.py",
}
_PACKAGES = ("readers", "migrator", "dualrun", "reports", "switchyard")


def _names_imported(path: Path, module_prefix: str) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {
        a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(module_prefix)
        for a in node.names
    }


def _package_files() -> list[Path]:
    return [p for pkg in _PACKAGES for p in (REPO / pkg).rglob("*.py")]


def test_only_the_listed_modules_name_the_store_implementation() -> None:
    naming = {
        str(p.relative_to(REPO)) for p in _package_files() if "SqlTriggerStore" in _names_imported(p, "scheduler_core")
    }
    assert naming - CONCRETE_STORE_ALLOWED == set(), "type these against scheduler_core.ports"


def test_no_package_renders_the_cores_rows() -> None:
    """The core's rows (and their SQL literals) are rendered by the core: other packages
    hand model objects to its store (scheduler_core.store.definitions)."""
    bad = {
        str(p.relative_to(REPO)): sorted(
            _names_imported(p, "scheduler_core.store.rows")
            | (
                _names_imported(p, "scheduler_core.store.definitions")
                - {"Definition", "DefinitionWrites", "RenderedDefinitions"}
            )
        )
        for p in _package_files()
    }
    assert {k: v for k, v in bad.items() if v} == {}
