"""Prompt data shipped inside PyPI wheels and the ``speed-lite`` measurement suite built from it."""
