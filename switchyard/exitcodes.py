"""Documented exit codes of every `switchyard` command (also in the README), and what each
means: the one source of the "Exit codes:" paragraph of every command's --help."""

from __future__ import annotations

from collections.abc import Mapping

OK = 0
FAILED = 1  # the command ran and the answer is "no" (e.g. verdict not ready, check failed)
USAGE = 2  # bad arguments or invalid input (click uses 2 for usage errors too)
UNREACHABLE = 3  # a server could not be reached, or refused the credentials
SCHEMA = 4  # the store has no schema, or another one
REFUSED = 5  # an operation was refused by a rule (e.g. cutover gate)

MEANING: Mapping[int, str] = {
    OK: "ok",
    FAILED: "failed: the command ran and the answer is no",
    USAGE: "bad arguments or input (an unknown business, job or trigger included)",
    UNREACHABLE: "a server unreachable or the credentials refused",
    SCHEMA: "the store's schema missing or different",
    REFUSED: "refused by a rule",
}


def describe(codes: Mapping[int, str | None]) -> str:
    """ "Exit codes: 0 ok, 2 bad ..." for `codes`, each with the command's own words for
    it, or the general meaning (None)."""
    return "Exit codes: " + "; ".join(f"{c} {why or MEANING[c]}" for c, why in sorted(codes.items())) + "."
