"""Exceptions raised by the offrac client: one per non-OK status, plus connection loss."""

from __future__ import annotations

from .protocol import ResponseHeader, Status

__all__ = [
    "BadInputError",
    "BufferExistsError",
    "BusyError",
    "ConnectionClosedError",
    "FuelExhaustedError",
    "InternalError",
    "MalformedError",
    "OffracError",
    "QuotaExceededError",
    "RequestTimeoutError",
    "ShuttingDownError",
    "TooLargeError",
    "TrappedError",
    "UnauthorizedError",
    "UnknownBufferError",
    "UnknownFunctionError",
    "UnreachableError",
    "UnsupportedError",
    "UnsupportedVersionError",
    "error_for_response",
]


class OffracError(Exception):
    """Base class of every offrac error.

    ``status`` is the response :class:`Status` (None for errors without a response, e.g. a
    closed connection), ``request_id`` the id of the failed request (None if unknown),
    ``message`` the node's UTF-8 message (or the client's description) and ``detail`` the
    response's status-specific number. ``header`` is the full response header, when there is one.
    """

    #: The status a subclass stands for (None on the base class and connection errors).
    STATUS: Status | None = None

    def __init__(
        self,
        message: str = "",
        *,
        status: Status | None = None,
        request_id: int | None = None,
        detail: int = 0,
        header: ResponseHeader | None = None,
    ) -> None:
        self.status: Status | None = status if status is not None else self.STATUS
        self.request_id: int | None = request_id
        self.message: str = message
        self.detail: int = detail
        self.header: ResponseHeader | None = header
        super().__init__(self._describe())

    @property
    def hop(self) -> int | None:
        """Index of the chain hop that failed (0 for a single function); None without a response."""
        return self.header.hop_index if self.header is not None else None

    @property
    def device(self) -> int | None:
        """Device id of the node that answered with this error; None without a response."""
        return self.header.device if self.header is not None else None

    def _describe(self) -> str:
        parts = []
        if self.status is not None:
            parts.append(self.status.name)
        if self.request_id is not None:
            parts.append(f"request {self.request_id}")
        if self.header is not None and self.header.hop_index:
            parts.append(f"at hop {self.header.hop_index} (device {self.header.device})")
        if self.detail:
            parts.append(f"detail={self.detail}")
        head = " ".join(parts)
        if head and self.message:
            return f"{head}: {self.message}"
        return head or self.message

    def __reduce__(self) -> tuple[object, ...]:  # keep keyword arguments when pickled
        return (
            _rebuild,
            (type(self), self.message, self.status, self.request_id, self.detail, self.header),
        )


def _rebuild(
    cls: type[OffracError],
    message: str,
    status: Status | None,
    request_id: int | None,
    detail: int,
    header: ResponseHeader | None,
) -> OffracError:
    return cls(message, status=status, request_id=request_id, detail=detail, header=header)


class BusyError(OffracError):
    """BUSY: no reassembly buffer was free (after the client's retries, if any)."""

    STATUS: Status | None = Status.BUSY


class UnknownFunctionError(OffracError):
    """UNKNOWN_FUNCTION: no slot hosts the function; ``detail`` is the function id."""

    STATUS: Status | None = Status.UNKNOWN_FUNCTION


class TooLargeError(OffracError):
    """TOO_LARGE: the payload exceeds the node's maximum; ``detail`` is the maximum."""

    STATUS: Status | None = Status.TOO_LARGE


class MalformedError(OffracError):
    """MALFORMED: the node rejected the header."""

    STATUS: Status | None = Status.MALFORMED


class BadInputError(OffracError):
    """BAD_INPUT: the function rejected the payload or parameter."""

    STATUS: Status | None = Status.BAD_INPUT


class InternalError(OffracError):
    """INTERNAL: a bug in the node or a function."""

    STATUS: Status | None = Status.INTERNAL


class UnsupportedVersionError(OffracError):
    """UNSUPPORTED_VERSION: the node does not speak this version; ``detail`` is its highest."""

    STATUS: Status | None = Status.UNSUPPORTED_VERSION


class RequestTimeoutError(OffracError):
    """TIMEOUT: the node gave up on the request (its budget ran out before a hop, a forwarded
    hop got no answer, or it stalled mid-transfer). Not a builtin :class:`TimeoutError`, which
    is what a client-side timeout raises: the two stay apart in ``except`` clauses."""

    STATUS: Status | None = Status.TIMEOUT


class ShuttingDownError(OffracError):
    """SHUTTING_DOWN: the node is shutting down and did not run the request."""

    STATUS: Status | None = Status.SHUTTING_DOWN


class UnsupportedError(OffracError):
    """UNSUPPORTED: a valid request the node cannot serve (not sent by this version of the node)."""

    STATUS: Status | None = Status.UNSUPPORTED


class UnreachableError(OffracError):
    """UNREACHABLE: a chain hop's device cannot be reached (not in the node's device table, or
    the link to it is down or broke before the hop's answer); ``hop`` is that hop, ``detail``
    the device id. The hop may have run if the link broke."""

    STATUS: Status | None = Status.UNREACHABLE


class UnauthorizedError(OffracError):
    """UNAUTHORIZED: a control request whose authentication failed (unknown tenant, bad MAC,
    a timestamp outside the node's window, or a replayed nonce); see ``docs/control.md``."""

    STATUS: Status | None = Status.UNAUTHORIZED


class TrappedError(OffracError):
    """TRAPPED: the slot's WebAssembly module trapped on this request (the slot goes on
    serving)."""

    STATUS: Status | None = Status.TRAPPED


class FuelExhaustedError(OffracError):
    """FUEL_EXHAUSTED: the slot's WebAssembly module used up its fuel on this request and was
    stopped (the slot goes on serving)."""

    STATUS: Status | None = Status.FUEL_EXHAUSTED


class QuotaExceededError(OffracError):
    """QUOTA_EXCEEDED: the request's tenant is over a quota (requests in flight, reassembly
    bytes; ``detail`` = the limit). Retry once some of its requests are answered."""

    STATUS: Status | None = Status.QUOTA_EXCEEDED


class UnknownBufferError(OffracError):
    """UNKNOWN_BUFFER: a named buffer the request reads is not on the node (for its tenant);
    ``detail`` = the name."""

    STATUS: Status | None = Status.UNKNOWN_BUFFER


class BufferExistsError(OffracError):
    """BUFFER_EXISTS: a buffer ``CREATE`` named a buffer the tenant already keeps on the node
    (nothing changed); ``detail`` = the name."""

    STATUS: Status | None = Status.BUFFER_EXISTS


class ConnectionClosedError(OffracError, ConnectionError):
    """The connection closed (or broke) while the request was outstanding, or before it was
    sent. Also a builtin :class:`ConnectionError`."""


class ConnectError(OffracError, ConnectionError):
    """The client could not connect to the node (refused, unreachable, timed out); the
    operating system's error is ``__cause__``. Also a builtin :class:`ConnectionError`."""


_BY_STATUS: dict[Status, type[OffracError]] = {
    cls.STATUS: cls
    for cls in (
        BusyError,
        UnknownFunctionError,
        TooLargeError,
        MalformedError,
        BadInputError,
        InternalError,
        UnsupportedVersionError,
        RequestTimeoutError,
        ShuttingDownError,
        UnsupportedError,
        UnreachableError,
        UnauthorizedError,
        TrappedError,
        FuelExhaustedError,
        QuotaExceededError,
        UnknownBufferError,
        BufferExistsError,
    )
    if cls.STATUS is not None
}


def error_for_response(header: ResponseHeader, payload: bytes | bytearray | memoryview) -> OffracError:
    """The typed exception for a non-OK response (its payload is the node's UTF-8 message)."""
    if header.status == Status.OK:
        raise ValueError("error_for_response called with an OK response")
    cls = _BY_STATUS.get(header.status, OffracError)
    message = bytes(payload).decode("utf-8", errors="replace")
    return cls(
        message,
        status=header.status,
        request_id=header.request_id,
        detail=header.detail,
        header=header,
    )
