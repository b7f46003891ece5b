"""User-facing errors.

Every error a user can cause (a bad file, an unsupported op, a wrong input) is a
`TirError`: the CLI prints its one-line message and exits with status 2. Anything
else that escapes is a bug in tensorir and keeps its traceback.
"""

from __future__ import annotations


class TirError(Exception):
    """A problem with the user's input, reported as one line."""


class ModelError(TirError):
    """The model file or graph is malformed (truncated, cyclic, missing tensors...)."""


class UnsupportedOpError(TirError):
    """The model uses op types that tensorir has no converter for."""


class InputError(TirError):
    """An input given at run time has the wrong name, shape or dtype."""


class ShapeError(TirError):
    """Shape or dtype inference failed for a node."""
