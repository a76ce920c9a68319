"""Neutral legacy records -> the trigger model; the migration ledger; cutover and rollback."""
