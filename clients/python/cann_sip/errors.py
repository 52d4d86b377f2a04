"""Errors raised by the sip client.

Every error the server can report maps to one subclass of :class:`SipError`,
keyed by the stable status codes of docs/protocol.md ("Status codes").
``err.code`` is the upper-case name ("INVALID_ARGUMENT"), ``err.code_value``
the number on the wire, ``err.message`` the server's (or client's) text.
"""

from typing import Dict, Optional, Tuple, Type, Union

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
    "copy_error",
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


def code_name(code: Union[int, str]) -> str:
    """Name of a numeric code ("UNKNOWN" when out of range); names pass through."""
    if isinstance(code, str):
        return code.upper() if code.upper() in _CODE_BY_NAME else "UNKNOWN"
    code = int(code)
    return CODE_NAMES[code] if 0 <= code < len(CODE_NAMES) else "UNKNOWN"


def code_value(code: Union[int, str]) -> int:
    """Number of a code given by name or number; -1 for an unknown name."""
    if isinstance(code, str):
        return _CODE_BY_NAME.get(code.upper(), -1)
    return int(code)


class SipError(Exception):
    """Base of every error a sip call raises.

    ``SipError(code, message)``: ``code`` is a wire number or a name.
    """

    def __init__(self, code: Union[int, str], message: Optional[str] = "") -> None:
        self.code_value = code_value(code)
        self.code = code_name(code)
        self.message = "" if message is None else str(message)
        # Filled in by the client where known (the request the error answers).
        self.request_id: Optional[int] = None
        super().__init__(self.code_value, self.message)

    def __str__(self) -> str:
        return "%s: %s" % (self.code, self.message) if self.message else self.code

    def __repr__(self) -> str:
        return "%s(%r, %r)" % (type(self).__name__, self.code, self.message)

    def __reduce__(self) -> Tuple[object, Tuple[int, str]]:
        return (sip_error_from_code, (self.code_value, self.message))


class _CodedError(SipError):
    """A SipError whose class names its code: ``Cls(message)``."""

    CODE = 0

    def __init__(self, message: Optional[str] = "") -> None:
        SipError.__init__(self, self.CODE, message)


class InvalidArgumentError(_CodedError):
    """Malformed request: wrong input name, dtype or shape."""

    CODE = 1


class NotFoundError(_CodedError):
    """Unknown pool or pipeline."""

    CODE = 2


class AlreadyExistsError(_CodedError):
    """The object already exists."""

    CODE = 3


class ResourceExhaustedError(_CodedError):
    """Queue full, out of memory, or frame too large."""

    CODE = 4


class DeadlineExceededError(_CodedError):
    """The request's deadline (or the client's timeout) passed."""

    CODE = 5


class UnavailableError(_CodedError):
    """Server unreachable, connection lost, pool not ready or draining."""

    CODE = 6


class CancelledError(_CodedError):
    """The call was cancelled (client closed)."""

    CODE = 7


class UnimplementedError(_CodedError):
    """Unsupported message or feature."""

    CODE = 8


class FailedPreconditionError(_CodedError):
    """Failed precondition."""

    CODE = 9


class PermissionDeniedError(_CodedError):
    """Permission denied."""

    CODE = 10


class InternalError(_CodedError):
    """Backend failure or protocol violation."""

    CODE = 11


class UnauthenticatedError(_CodedError):
    """No valid token for the request's API group (docs/security.md)."""

    CODE = 12


_CLASS_BY_CODE: Dict[int, Type[_CodedError]] = {
    cls.CODE: cls
    for cls in (InvalidArgumentError, NotFoundError, AlreadyExistsError, ResourceExhaustedError,
                DeadlineExceededError, UnavailableError, CancelledError, UnimplementedError,
                FailedPreconditionError, PermissionDeniedError, InternalError,
                UnauthenticatedError)
}


def sip_error_from_code(code: Union[int, str], message: Optional[str] = "") -> SipError:
    """Builds the SipError subclass that stands for ``code`` (a number or a name).

    Unknown codes (and OK, which is not an error) give a plain SipError.
    """
    cls = _CLASS_BY_CODE.get(code_value(code))
    if cls is None:
        return SipError(code, message)
    return cls(message)


def copy_error(err: BaseException) -> BaseException:
    """A fresh exception of the same class and text (one per waiting call, so
    that callers raising them don't share tracebacks)."""
    if not isinstance(err, SipError):
        return err
    if type(err) is SipError:
        return SipError(err.code_value, err.message)
    return sip_error_from_code(err.code_value, err.message)
