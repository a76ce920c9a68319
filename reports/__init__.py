"""Comparison and cutover reports: HTML with plots, Markdown, JSON."""
