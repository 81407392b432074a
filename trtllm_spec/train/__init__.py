"""Drafter training, export and conversion (heavy dependencies are imported by the submodules only)."""
