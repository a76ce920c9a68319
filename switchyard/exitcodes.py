"""Documented exit codes of every `switchyard` command (also in the README)."""

from __future__ import annotations

OK = 0
FAILED = 1  # the command ran and the answer is "no" (e.g. verdict not ready, check failed)
USAGE = 2  # bad arguments or invalid input (click uses 2 for usage errors too)
UNREACHABLE = 3  # a server could not be reached, or refused the credentials
SCHEMA = 4  # the store has no schema, or another one
REFUSED = 5  # an operation was refused by a rule (e.g. cutover gate)
