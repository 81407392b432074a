"""The names of the built-in measurement suites, written once: the recipe's default (``measure.suite``), the
measure engines' defaults and the suite builders (``data/suite.py`` builds ``speed-lite``, ``data/mode_suite.py``
``speed-lite-modes``) read them here."""

from __future__ import annotations

SUITE_NAME = "speed-lite"  # SPEED-Bench's eleven categories from the packaged PyPI prompt data
MODES_SUITE = "speed-lite-modes"  # speed-lite's prompts in the request modes (json, tool call, thinking on / off)
BUILTIN_SUITES = (SUITE_NAME, MODES_SUITE)
