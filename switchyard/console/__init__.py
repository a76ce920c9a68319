"""The operator console: read-only pages and a JSON API over the store (data.py: the
queries, app.py: the HTTP side, templates/: the pages)."""
