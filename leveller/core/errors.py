"""The one error type of the pure core."""


class UserError(ValueError):
    """Bad input from the user: the message names the field, the value and what is allowed.

    Lives in core so pure modules can raise it without importing the rest of the
    package; the CLI prints it as one line and exits 2.
    """
