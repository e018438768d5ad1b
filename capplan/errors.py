"""capplan's own exceptions.

Everything a user can cause (a bad file, an unknown profile name, a model that does not fit)
is an *expected* outcome: it derives from :class:`CapplanError` and the command line prints its
one-line message with no traceback. Any other exception is a bug.
"""

from __future__ import annotations


class CapplanError(Exception):
    """Base class of every expected, user-facing failure (printed as one line, exit code 2)."""


class InputError(CapplanError):
    """A user's file or flag is invalid: the message names the file, the field and what is allowed."""


class NotFoundError(CapplanError):
    """A named workload, model or hardware profile does not exist; the message lists valid names."""


class OutputExistsError(CapplanError):
    """An output file exists already and ``--force`` was not given."""


class DoesNotFitError(CapplanError):
    """The model's weights (or other fixed memory) exceed the memory budget."""
