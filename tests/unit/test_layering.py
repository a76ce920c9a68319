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
