"""Errors raised by the sip client.

Every error the server can report maps to one subclass of :class:`SipError`,
keyed by the stable status codes of docs/protocol.md ("Status codes").
``err.code`` is the upper-case name ("INVALID_ARGUMENT"), ``err.code_value``
the number on the wire, ``err.message`` the server's (or client's) text.
"""

__all__ = [
    "CODE_NAMES",
    "SipError",
    "InvalidArgumentError",
    "NotFoundError",
    "AlreadyExistsError",
    "ResourceExhaustedError",
    "DeadlineExceededError",
    "UnavailableError",
    "CancelledError",
    "UnimplementedError",
    "FailedPreconditionError",
    "PermissionDeniedError",
    "UnauthenticatedError",
    "InternalError",
    "code_name",
    "code_value",
    "sip_error_from_code",
]

# Index = wire code. Append-only, like the server's table.
CODE_NAMES = (
    "OK",
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "RESOURCE_EXHAUSTED",
    "DEADLINE_EXCEEDED",
    "UNAVAILABLE",
    "CANCELLED",
    "UNIMPLEMENTED",
    "FAILED_PRECONDITION",
    "PERMISSION_DENIED",
    "INTERNAL",
    "UNAUTHENTICATED",
)
_CODE_BY_NAME = {name: i for i, name in enumerate(CODE_NAMES)}


def code_name(code):
    """Name of a numeric code ("UNKNOWN" when out of range); names pass through."""
    if isinstance(code, str):
        return code.upper() if code.upper() in _CODE_BY_NAME else "UNKNOWN"
    code = int(code)
    return CODE_NAMES[code] if 0 <= code < len(CODE_NAMES) else "UNKNOWN"


def code_value(code):
    """Number of a code given by name or number; -1 for an unknown name."""
    if isinstance(code, str):
        return _CODE_BY_NAME.get(code.upper(), -1)
    return int(code)


class SipError(Exception):
    """Base of every error a sip call raises.

    ``SipError(code, message)``: ``code`` is a wire number or a name.
    """

    def __init__(self, code, message=""):
        self.code_value = code_value(code)
        self.code = code_name(code)
        self.message = "" if message is None else str(message)
        # Filled in by the client where known (the request the error answers).
        self.request_id = None
        super().__init__(self.code_value, self.message)

    def __str__(self):
        return "%s: %s" % (self.code, self.message) if self.message else self.code

    def __repr__(self):
        return "%s(%r, %r)" % (type(self).__name__, self.code, self.message)

    def __reduce__(self):
        return (sip_error_from_code, (self.code_value, self.message))


def _subclass(name, value, doc):
    def __init__(self, message=""):
        SipError.__init__(self, value, message)

    return type(name, (SipError,), {"__init__": __init__, "__doc__": doc, "CODE": value,
                                    "__module__": __name__})


InvalidArgumentError = _subclass(
    "InvalidArgumentError", 1, "Malformed request: wrong input name, dtype or shape.")
NotFoundError = _subclass("NotFoundError", 2, "Unknown pool or pipeline.")
AlreadyExistsError = _subclass("AlreadyExistsError", 3, "The object already exists.")
ResourceExhaustedError = _subclass(
    "ResourceExhaustedError", 4, "Queue full, out of memory, or frame too large.")
DeadlineExceededError = _subclass(
    "DeadlineExceededError", 5, "The request's deadline (or the client's timeout) passed.")
UnavailableError = _subclass(
    "UnavailableError", 6, "Server unreachable, connection lost, pool not ready or draining.")
CancelledError = _subclass("CancelledError", 7, "The call was cancelled (client closed).")
UnimplementedError = _subclass("UnimplementedError", 8, "Unsupported message or feature.")
FailedPreconditionError = _subclass("FailedPreconditionError", 9, "Failed precondition.")
PermissionDeniedError = _subclass("PermissionDeniedError", 10, "Permission denied.")
InternalError = _subclass("InternalError", 11, "Backend failure or protocol violation.")
UnauthenticatedError = _subclass(
    "UnauthenticatedError", 12, "No valid token for the request's API group (docs/security.md).")

_CLASS_BY_CODE = {
    cls.CODE: cls
    for cls in (InvalidArgumentError, NotFoundError, AlreadyExistsError, ResourceExhaustedError,
                DeadlineExceededError, UnavailableError, CancelledError, UnimplementedError,
                FailedPreconditionError, PermissionDeniedError, InternalError,
                UnauthenticatedError)
}


def sip_error_from_code(code, message=""):
    """Builds the SipError subclass that stands for ``code`` (a number or a name).

    Unknown codes (and OK, which is not an error) give a plain SipError.
    """
    cls = _CLASS_BY_CODE.get(code_value(code))
    if cls is None:
        return SipError(code, message)
    return cls(message)
