"""The composition root: the CLI, settings and wiring. No domain logic lives here, and
nothing imports this package."""
