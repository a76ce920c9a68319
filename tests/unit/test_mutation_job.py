"""The mutation job as a long variant (`scripts/test --long`): every mutant of the switch's
deciding lines and of the instruments that count it is killed by a unit test or argued
equivalent in docs/mutation.md (tests/mutation_job.py, scripts/mutation). Here, quick:
the note's list of equivalent mutants is read as the job reads it."""

from __future__ import annotations

import pytest

from tests import mutation_job


def test_the_note_lists_its_equivalent_mutants_by_their_mutmut_names() -> None:
    listed = mutation_job.equivalent_mutants()
    assert listed, "docs/mutation.md lists no equivalent mutant under '## Equivalent mutants'"
    groups = [p for ps in mutation_job.GROUPS.values() for p in ps]
    assert all(mutation_job._matches(name, groups) for name in listed), sorted(listed)


@pytest.mark.slow
@pytest.mark.timeout(mutation_job.BUDGET_S + 600)
def test_every_mutant_of_the_deciding_lines_is_killed_or_argued_equivalent() -> None:
    """About 80 minutes from a fresh `mutants/` on the 2-core box with one worker (every
    group in full: docs/mutation.md has the figures of each); far less when mutmut keeps
    its earlier results."""
    unexplained = mutation_job.run(mutation_job.DEFAULT_GROUPS, budget_s=mutation_job.BUDGET_S)
    assert unexplained == 0, "mutants neither killed nor argued equivalent: see the lines above"
