"""Python client for offrac nodes: call accelerator functions over TCP.

>>> from offrac import Client
>>> with Client("127.0.0.1:7000") as c:          # doctest: +SKIP
...     c.call("topk", [5, 1, 9, 3], k=2)
array([9, 5], dtype=int32)
"""

from __future__ import annotations

from . import aio
from .client import Client, RequestFuture, Step, parse_address, wait_listening
from .control import FN_CONTROL, Controller
from .errors import (
    BadInputError,
    BusyError,
    ConnectError,
    ConnectionClosedError,
    FuelExhaustedError,
    InternalError,
    MalformedError,
    OffracError,
    QuotaExceededError,
    RequestTimeoutError,
    ShuttingDownError,
    TooLargeError,
    TrappedError,
    UnauthorizedError,
    UnknownBufferError,
    UnknownFunctionError,
    UnreachableError,
    UnsupportedError,
    UnsupportedVersionError,
    error_for_response,
)
from .pool import AsyncPool, Pool
from .protocol import (
    DEVICE_SELF,
    FLAG_TRACE,
    FN_DESCRIBE,
    FN_REGISTER_REPLY,
    FUNCTION_IDS,
    FUNCTION_NAMES,
    HEADER_LEN,
    MAX_HOPS,
    REQUEST_ID_NONE,
    REQUEST_MAGIC,
    RESPONSE_MAGIC,
    VERSION,
    FunctionId,
    HeaderError,
    Hop,
    HopTime,
    RequestHeader,
    ResponseHeader,
    Status,
    encode_request,
    function_id,
    function_name,
)

__version__ = "0.1.0"

__all__ = [
    "DEVICE_SELF",
    "FLAG_TRACE",
    "FN_CONTROL",
    "FN_DESCRIBE",
    "FN_REGISTER_REPLY",
    "FUNCTION_IDS",
    "FUNCTION_NAMES",
    "HEADER_LEN",
    "MAX_HOPS",
    "REQUEST_ID_NONE",
    "REQUEST_MAGIC",
    "RESPONSE_MAGIC",
    "VERSION",
    "AsyncPool",
    "BadInputError",
    "BusyError",
    "Client",
    "ConnectError",
    "ConnectionClosedError",
    "Controller",
    "FuelExhaustedError",
    "FunctionId",
    "HeaderError",
    "Hop",
    "HopTime",
    "InternalError",
    "MalformedError",
    "OffracError",
    "Pool",
    "QuotaExceededError",
    "RequestFuture",
    "RequestHeader",
    "RequestTimeoutError",
    "ResponseHeader",
    "ShuttingDownError",
    "Status",
    "Step",
    "TooLargeError",
    "TrappedError",
    "UnauthorizedError",
    "UnknownBufferError",
    "UnknownFunctionError",
    "UnreachableError",
    "UnsupportedError",
    "UnsupportedVersionError",
    "__version__",
    "aio",
    "encode_request",
    "error_for_response",
    "function_id",
    "function_name",
    "parse_address",
    "wait_listening",
]
