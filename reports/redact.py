"""Secrets never reach a report: the masking is the database kit's (`dbkit.redact`), named
here for the report and console modules that import it from the reports."""

from __future__ import annotations

from dbkit.redact import redact as redact
from dbkit.redact import redact_tree as redact_tree
