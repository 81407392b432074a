"""Markdown / JSON / PNG rendering shared by plan, measure and build."""
