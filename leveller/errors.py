"""Errors that the CLI reports as a one-line message and a non-zero exit."""


class UserError(Exception):
    """Bad input from the user: the message names the field, the value and what is allowed."""
