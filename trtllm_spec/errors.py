"""One error family. Every message names the field or file, the bad value, what is allowed and the fix.

Only ``cli.py`` turns these into exit codes: ``UserError`` (bad input) -> 2, ``CheckFailed`` -> 1.
"""

from __future__ import annotations


class TrtllmSpecError(Exception):
    """Base of all errors this package raises on purpose."""

    exit_code = 2


class UserError(TrtllmSpecError):
    """Bad input: a recipe, a flag, a file. Exit code 2, nothing written."""


class RecipeError(UserError):
    """A recipe (or ``--set`` override) that does not validate."""


class ShapeError(UserError):
    """A config.json that cannot be read into a model shape."""


class HardwareError(UserError):
    """Unknown GPU name or a malformed hardware file."""


class AcceptanceError(UserError):
    """A malformed acceptance / speculation-profile file."""


class OutputExistsError(UserError):
    """The output folder exists and ``--force`` was not given."""


class DependencyMissing(UserError):
    """An optional dependency (extra) is not installed."""


class CheckFailed(TrtllmSpecError):
    """A check ran and found problems (doctor, verify). Exit code 1."""

    exit_code = 1
