"""Comparison and cutover reports: HTML with plots, Markdown, JSON.

`reports.load.load_report(store, business, now=)` / `load_overview(store, now=)` read what a
report shows; `.content()` is the redacted, format-independent content;
`reports.write.write_report(content, "html" | "md" | "json", path)` writes one form.
"""
