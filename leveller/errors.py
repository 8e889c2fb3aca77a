"""Errors that the CLI reports as a one-line message and a non-zero exit."""

from leveller.model.errors import UserError

__all__ = ["UserError"]
