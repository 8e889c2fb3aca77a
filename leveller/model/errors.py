"""The error types of the domain: bad input from a user, and a bad field of a message."""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user: the message names the field, the value and what is allowed.

    The CLI prints it as one line and exits 2.
    """


class FieldError(ValueError):
    """A value breaks a rule of the model; ``field`` is a path such as ``flows[2].dport``.

    The wire layer calls it ``SchemaError`` (leveller.codec): a message that does not
    follow the schema is one whose fields break the model's rules.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class CallFailed(Exception):
    """A call to another process got no valid answer (the agent catches this whatever the transport;
    leveller.rpc.transport.RpcFailure is the gRPC one)."""
