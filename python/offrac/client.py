"""A pipelined, thread-safe TCP client for an offrac node."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import heapq
import itertools
import json
import math
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeGuard, TypeVar, cast, overload

import numpy as np
import numpy.typing as npt

from .errors import ConnectError, ConnectionClosedError, OffracError, error_for_response
from .protocol import (
    DEVICE_SELF,
    FN_DESCRIBE,
    FN_REGISTER_REPLY,
    HEADER_LEN,
    MAX_BUDGET_US,
    MAX_HOPS,
    FunctionId,
    HeaderError,
    Hop,
    HopTime,
    RequestHeader,
    ResponseHeader,
    Status,
    function_id,
    function_name,
)
from .registry import CSR, FUNCTIONS, FunctionSpec, Ragged, decode_output, encode_input, pack_params

if TYPE_CHECKING:
    from .control import Controller

__all__ = ["Client", "RequestFuture", "Step", "parse_address", "wait_listening"]

_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
_I32 = np.iinfo(np.int32)

#: What a decoded result can be: a numpy array (topk, logit, minmax, matmul) or bytes (echo, spin).
#: ``call``/``submit`` are annotated ``Any`` because the type depends on the function *name*.
Result = npt.NDArray[Any] | bytes
#: Input accepted by :meth:`Client.call`.
Data = bytes | bytearray | memoryview | npt.ArrayLike | tuple[npt.ArrayLike, npt.ArrayLike]

#: Inputs by the element type a function takes, for the typed overloads of ``call`` and
#: ``submit`` (raw bytes always pass through as they are).
BytesInput = bytes | bytearray | memoryview
IntInput = npt.NDArray[np.integer[Any]] | Sequence[int] | BytesInput
FloatInput = npt.NDArray[np.integer[Any] | np.floating[Any]] | Sequence[float] | BytesInput
RaggedInput = Ragged | Sequence[Sequence[int] | npt.NDArray[np.integer[Any]]] | BytesInput
#: matmul: one n x n matrix, or the pair (a, b).
MatmulInput = FloatInput | tuple[npt.ArrayLike, npt.ArrayLike]

_T = TypeVar("_T")

#: Distinct (function, parameters) plans a client keeps.
_PLANS_MAX: Final = 1024

#: Functions whose output has the shape of their input (results are reshaped like it).
_ELEMENTWISE = frozenset(
    {
        FunctionId.LOGIT,
        FunctionId.MINMAX,
        FunctionId.ECHO,
        FunctionId.MAPID,
        FunctionId.BUCKETIZE,
        FunctionId.SIGRIDHASH,
        FunctionId.GETLOCALHOUR,
        FunctionId.BOXCOX,
    }
)


class RequestFuture(concurrent.futures.Future[_T]):
    """A :class:`concurrent.futures.Future` that also knows its ``request_id``."""

    request_id: int = 0


class _LedFuture:
    """The future of a synchronous call whose own thread reads the answer (``_led``): it
    never escapes the call and nobody blocks on it while the leader reads, so it needs none
    of ``concurrent.futures.Future``'s condition variable (a few µs per call). The same
    methods, as far as the client uses them."""

    __slots__ = ("_exc", "_state", "_value", "request_id")

    def __init__(self) -> None:
        self.request_id = 0
        self._state = 0  # 0 pending, 1 done, 2 cancelled
        self._value: Any = None
        self._exc: BaseException | None = None

    def done(self) -> bool:
        return self._state != 0

    def cancelled(self) -> bool:
        return self._state == 2

    def cancel(self) -> bool:
        if self._state == 0:
            self._state = 2
        return self._state == 2

    def set_result(self, value: Any) -> None:
        if self._state != 0:
            raise concurrent.futures.InvalidStateError("already done")
        self._value = value
        self._state = 1

    def set_exception(self, exc: BaseException) -> None:
        if self._state != 0:
            raise concurrent.futures.InvalidStateError("already done")
        self._exc = exc
        self._state = 1

    def result(self, timeout: float | None = None) -> Any:
        if self._state == 0 and timeout:
            # Only when another thread is closing the connection: it fails us shortly.
            end = time.monotonic() + timeout
            while self._state == 0 and time.monotonic() < end:
                time.sleep(0.001)
        if self._state == 2:
            raise concurrent.futures.CancelledError()
        if self._state == 0:
            raise TimeoutError("no answer")
        if self._exc is not None:
            raise self._exc
        return self._value


_Decoder = Callable[[bytearray], Any]


@dataclass
class _Pending:
    future: RequestFuture[Any] | _LedFuture
    #: The request as sent (header and payload joined, or the header alone; see ``payload``).
    wire: bytes
    decode: _Decoder | None  # None: raw mode, the result is (header, payload) whatever the status
    return_info: bool
    retries_left: int
    attempt: int = 0
    #: The caller's array the result goes into (``out=``).
    out: npt.NDArray[Any] | None = None
    #: A large payload, sent from its own buffer after ``wire`` (never copied into a joined
    #: message); empty when ``wire`` holds the whole request.
    payload: bytes | memoryview = b""


#: Payloads from this size on are sent from their own buffer (gathered by ``sendmsg``) rather
#: than copied behind the header: below it, one joined buffer is cheaper.
_GATHER_MIN: Final = 16384


def _byte_view(payload: bytes | bytearray | memoryview) -> bytes | memoryview:
    """``payload`` as bytes without a copy where it can be: a flat byte view of a contiguous
    buffer (``len`` counts bytes, whatever the buffer's item type); others copied."""
    if isinstance(payload, bytes):
        return payload
    view = memoryview(payload)
    return view.cast("B") if view.c_contiguous else view.tobytes()


def _send_gather(sock: socket.socket, header: bytes, payload: bytes | memoryview) -> None:
    """``sendall(header + payload)`` without joining them."""
    sent = sock.sendmsg([header, payload])
    if sent < len(header):
        sock.sendall(header[sent:])
        sent = len(header)
    rest = memoryview(payload)[sent - len(header) :]
    if rest:
        sock.sendall(rest)


#: The payload of an answer read straight into its request's ``out`` array.
_IN_OUT = bytearray()
# An answer at least this long is read from the socket into a bytearray of its own (the
# payload the caller gets), not through the read buffer: no copy of it in between, and the
# read buffer stays at its first size instead of growing to the largest answer.
DIRECT_READ_MIN: Final = 1 << 16
#: The largest answer payload a client allocates for by default (1 GiB, as the Rust client's
#: ``DEFAULT_MAX_RESPONSE_PAYLOAD``): a header garbled on the way with its magic intact could
#: otherwise make the client allocate up to 4 GiB. ``max_answer_bytes`` raises it.
DEFAULT_MAX_ANSWER_BYTES: Final = 1 << 30


def check_max_answer_bytes(value: int) -> int:
    """``value`` if it is a valid ``max_answer_bytes`` (an int, at least 64 KiB: every answer
    below ``DIRECT_READ_MIN`` is read through the connection's buffer anyway)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < DIRECT_READ_MIN:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"max_answer_bytes must be an int >= {DIRECT_READ_MIN}, not {value!r}")
    return value


def answer_too_large(n: int, limit: int) -> str:
    """Why a connection was closed on an answer of ``n`` bytes over ``limit``."""
    return (
        f"the node announced an answer of {n} bytes, over this client's max_answer_bytes "
        f"({limit}); the connection is closed (pass a larger max_answer_bytes to accept it)"
    )


#: Output layouts an ``out=`` array can take, by numpy dtype.
_OUT_DTYPES: Final = {"int32[]": np.int32, "uint32[]": np.uint32, "float32[]": np.float32}


def check_out(fid: int, out: object) -> npt.NDArray[Any]:
    """``out`` as the array a result of function ``fid`` is written into, or TypeError."""
    spec = _spec(fid)
    layout = "float32[]" if fid == FunctionId.MATMUL else (spec.output if spec else "bytes")
    dtype = _OUT_DTYPES.get(layout)
    name = function_name(fid) or str(fid)
    if dtype is None:
        raise TypeError(f"out= takes the result of a function returning an array; {name} returns {layout}")
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, not {type(out).__name__}")
    if (
        out.dtype != np.dtype(dtype).newbyteorder("<")
        or not out.flags.c_contiguous
        or not out.flags.writeable
    ):
        raise TypeError(
            f"out for {name} must be a writeable C-contiguous little-endian {np.dtype(dtype).name} array, "
            f"not {out.dtype} (contiguous={out.flags.c_contiguous}, writeable={out.flags.writeable})"
        )
    return out


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``"host:port"``, ``"[v6addr]:port"`` or ``(host, port)`` -> ``(host, port)``."""
    if isinstance(address, tuple):
        host, port = address
        return str(host), int(port)
    host, sep, port_s = address.rpartition(":")
    if not sep or not host or not port_s.isdigit():
        raise ValueError(f"address must look like 'host:port', got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_s)


def wait_listening(address: str | tuple[str, int], timeout: float = 5.0) -> None:
    """Wait until something accepts TCP connections at ``address`` (a node or any other server
    just started), trying every 20 ms. Raises :class:`ConnectError` after ``timeout`` seconds,
    with the last operating system error as ``__cause__``."""
    host, port = parse_address(address)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError as e:
            if time.monotonic() > deadline:
                raise ConnectError(f"nothing listens on {host}:{port} after {timeout:g} s") from e
            time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# Input encoding and output decoding


def _is_raw(data: object) -> TypeGuard[bytes | bytearray | memoryview]:
    return isinstance(data, (bytes, bytearray, memoryview))


def _u64_param(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}= must be an int, not {type(value).__name__}")
    v = int(value)
    if not 0 <= v <= _U64_MAX:
        raise ValueError(f"{name}={v} outside the u64 range")
    return v


def _spec(fid: int) -> FunctionSpec | None:
    return FUNCTIONS[fid] if fid < len(FUNCTIONS) else None


def param_of(fid: int, params: Mapping[str, object]) -> int:
    """The u64 wire parameter of function ``fid`` from its keyword fields (the registry's,
    e.g. ``k=`` for topk, ``max_value=``/``salt=`` for sigridhash) or a raw ``param=``.

    Fields are range-checked against their width; what a value means is the node's to judge
    (e.g. ``k=0`` gets ``BAD_INPUT``).
    """
    return pack_params(_spec(fid), params)


def prepare(fid: int, data: Data, params: Mapping[str, object]) -> tuple[bytes, int, _Decoder]:
    """Encode ``data`` and the keyword parameters for function ``fid``.

    Returns ``(payload, param, decoder)``.
    """
    param = param_of(fid, params)
    spec = _spec(fid)
    pair = isinstance(data, (tuple, list)) and len(data) == 2
    if fid == FunctionId.MATMUL and pair and all(np.ndim(m) == 2 for m in data):
        a, b = (np.asarray(m) for m in data)
        if a.shape != b.shape or a.shape[0] != a.shape[1]:
            raise ValueError(f"matmul needs two n x n matrices, got shapes {a.shape} and {b.shape}")
        n = a.shape[0]
        if param not in (0, n):
            raise ValueError(f"n={param} does not match the {n} x {n} matrices")
        enc = [np.ascontiguousarray(m, dtype="<f4").tobytes() for m in (a, b)]
        return enc[0] + enc[1], n, output_decoder(fid)
    if spec is None:
        # A function this client does not know: bytes in, bytes out.
        if _is_raw(data):
            return bytes(data), param, output_decoder(fid)
        if isinstance(data, np.ndarray):
            return np.ascontiguousarray(data).tobytes(), param, output_decoder(fid)
        raise TypeError(f"{type(data).__name__} input: pass bytes, bytearray, memoryview or a numpy array")
    payload, shape = encode_input(spec, data)
    return payload, param, output_decoder(fid, shape if fid in _ELEMENTWISE else None)


def _decode_matrix(buf: bytearray) -> npt.NDArray[np.float32]:
    count = len(buf) // 4
    n = math.isqrt(count)
    if len(buf) % 4 or n * n != count:
        raise OffracError(f"matmul returned {len(buf)} bytes, not an n x n float32 matrix")
    return np.frombuffer(buf, dtype="<f4").astype(np.float32, copy=False).reshape(n, n)


def output_decoder(fid: int, shape: tuple[int, ...] | None = None) -> _Decoder:
    """How to decode what function ``fid`` returns, from its output layout in the registry
    (``shape`` reshapes element-wise results)."""
    if shape is None or len(shape) <= 1:
        # Flat results: one decoder per function, made once.
        cached = _FLAT_DECODERS.get(fid)
        if cached is None:
            cached = _FLAT_DECODERS[fid] = _make_decoder(fid, None)
        return cached
    return _make_decoder(fid, shape)


_FLAT_DECODERS: dict[int, _Decoder] = {}


def _make_decoder(fid: int, shape: tuple[int, ...] | None) -> _Decoder:
    if fid == FunctionId.MATMUL:
        return _decode_matrix
    spec = _spec(fid)
    layout = spec.output if spec else "bytes"

    def decode(buf: bytearray) -> Any:
        try:
            return decode_output(layout, buf, shape)
        except ValueError as e:
            raise OffracError(f"node returned a payload that is not {layout}: {e}") from None

    return decode


class Step:
    """One hop of a chain: a function (name or id), its keyword parameters and the device
    that runs it (this node by default). ``Step("topk", k=8)``."""

    __slots__ = ("device", "function", "param")

    def __init__(self, function: str | int, *, device: int = DEVICE_SELF, **params: object) -> None:
        self.function: int = function_id(function)
        self.param: int = param_of(self.function, params)
        if not 0 <= device <= 0xFF:
            raise ValueError(f"device {device} outside 0..=255")
        self.device: int = device

    def hop(self) -> Hop:
        return Hop(self.function, self.device, self.param)

    def __repr__(self) -> str:
        name = function_name(self.function) or str(self.function)
        return f"Step({name!r}, device={self.device}, param={self.param})"


#: A chain step: a function name or id (no parameters) or a :class:`Step`.
StepLike = str | int | Step


def prepare_chain(steps: Sequence[StepLike], data: Data) -> tuple[bytes, tuple[Hop, ...], _Decoder]:
    """Encode ``data`` for the first step; the decoder is the last step's."""
    chain = [s if isinstance(s, Step) else Step(s) for s in steps]
    if not 1 <= len(chain) <= MAX_HOPS:
        raise ValueError(f"a chain has 1 to {MAX_HOPS} steps, got {len(chain)}")
    first = chain[0]
    payload, param, _ = prepare(first.function, data, {"param": first.param})
    chain[0] = Step(first.function, device=first.device, param=param)
    shape = None
    if not _is_raw(data) and all(s.function in _ELEMENTWISE for s in chain):
        shape = np.shape(data)
    return payload, tuple(s.hop() for s in chain), output_decoder(chain[-1].function, shape)


def _budget_us(seconds: float | None) -> int:
    """A budget in seconds as the header's µs (0: none)."""
    if seconds is None:
        return 0
    us = round(seconds * 1e6)
    if not 1 <= us <= MAX_BUDGET_US:
        raise ValueError(f"budget must be 1 µs to {MAX_BUDGET_US / 1e6:.1f} s, got {seconds} s")
    return us


# ---------------------------------------------------------------------------------------------
# Retry timer


class _Timer:
    """One thread running callbacks at (roughly) given monotonic times; used for BUSY back-off."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="offrac-retry", daemon=True)
        self._thread.start()

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), fn))
            self._cv.notify()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cv.wait(self._heap[0][0] - now if self._heap else None)
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            fn()


# ---------------------------------------------------------------------------------------------
# The client


class Client:
    """A connection to one offrac node.

    ``Client("127.0.0.1:7000")`` connects at once. Many requests may be outstanding on the
    connection (see :meth:`submit`); a background thread reads responses and completes the
    futures by request id, in whatever order the node answers. All methods are thread-safe.

    Keyword arguments:

    * ``timeout``: seconds :meth:`call` waits for an answer (None = forever); also the
      connect timeout unless ``connect_timeout`` is given.
    * ``busy_retries``: how often a request answered ``BUSY`` is re-sent before
      :class:`~offrac.errors.BusyError` is raised (0 disables retries).
    * ``busy_backoff``: ``(low, high)`` seconds; retry *i* (from 0) waits
      ``uniform(low, high) * 2**i``, capped at ``busy_backoff_max``. The default 80-120 us start
      follows the OffRAC paper (Appendix B).
    * ``tenant``: default tenant id of requests.
    * ``key``: the tenant's HMAC-SHA256 key (bytes or hex). With it the client opens (and
      reopens) its connection with an authenticated hello (``docs/protocol.md``, "Tenants"):
      the node attributes the connection to ``tenant`` — its modules, quotas and DRR share.
      A refused hello raises (``UnauthorizedError``).
    * ``trace``: ask for per-hop timings; with ``return_info=True`` the header's ``hop_times``
      says which device ran each hop, how long it queued and ran.
    * ``budget``: default time budget of requests, in seconds (None: none). A hop not started
      within it of the request reaching the node is not run: the call raises
      :class:`~offrac.errors.RequestTimeoutError` naming the hop. Also a keyword of each call.

    * ``reconnect``: after the connection is lost (the node restarted, say), connect again
      before the next request, up to ``reconnect_attempts`` tries with jittered exponential
      back-off from ``reconnect_backoff[0]`` to ``reconnect_backoff[1]`` seconds. Requests
      outstanding at the loss fail with :class:`~offrac.errors.ConnectionClosedError` and are
      not re-sent (they may have run); never-ending waits do not happen.
    * ``max_answer_bytes``: the largest answer payload the client takes (default
      :data:`DEFAULT_MAX_ANSWER_BYTES`, 1 GiB). A header announcing more (a garbled stream,
      or a node configured for larger payloads) closes the connection: every outstanding
      request fails with :class:`~offrac.errors.ConnectionClosedError` saying so, and nothing
      of that size is allocated. An ``out=`` array of the answer's exact size is read into
      whatever its size.

    Counters: ``busy_retries_done`` (requests re-sent after BUSY), ``reconnects`` and
    ``last_response`` (the most recently received :class:`~offrac.protocol.ResponseHeader`,
    with the node's timings).
    """

    def __init__(
        self,
        address: str | tuple[str, int],
        *,
        timeout: float | None = 10.0,
        connect_timeout: float | None = None,
        busy_retries: int = 8,
        busy_backoff: tuple[float, float] = (80e-6, 120e-6),
        busy_backoff_max: float = 0.05,
        tenant: int = 0,
        key: bytes | str | None = None,
        budget: float | None = None,
        trace: bool = False,
        nodelay: bool = True,
        reconnect: bool = False,
        reconnect_attempts: int = 5,
        reconnect_backoff: tuple[float, float] = (0.05, 1.0),
        poll_us: int = 0,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        #: The largest answer payload the client allocates for (see above).
        self.max_answer_bytes: int = check_max_answer_bytes(max_answer_bytes)
        if busy_retries < 0:
            raise ValueError("busy_retries must be >= 0")
        if isinstance(poll_us, bool) or not isinstance(poll_us, int) or poll_us < 0:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"poll_us must be an int >= 0 (microseconds), not {poll_us!r}")
        #: A caller waiting for its answer first polls the socket without blocking, yielding
        #: the core between polls (``sched_yield``), for up to this many microseconds before
        #: it blocks in ``recv`` (0: it blocks at once). MPI's ranks wait this way.
        self.poll_us: int = poll_us
        #: Reads that found their bytes while polling (``poll_us``), not in a blocking ``recv``.
        self.polled_reads: int = 0
        lo, hi = busy_backoff
        if not 0 <= lo <= hi:
            raise ValueError("busy_backoff must be (low, high) with 0 <= low <= high")
        self.address: tuple[str, int] = parse_address(address)
        self.timeout: float | None = timeout
        self.busy_retries: int = busy_retries
        self.busy_backoff: tuple[float, float] = (float(lo), float(hi))
        self.busy_backoff_max: float = float(busy_backoff_max)
        self.tenant: int = tenant
        self._key: bytes | None = bytes.fromhex(key) if isinstance(key, str) else key
        self.budget = budget
        self.trace = trace
        _budget_us(budget)  # checked now, not at the first call
        self.busy_retries_done: int = 0
        self.last_response: ResponseHeader | None = None

        if reconnect_attempts < 1 or not 0 < reconnect_backoff[0] <= reconnect_backoff[1]:
            raise ValueError("reconnect_attempts >= 1 and reconnect_backoff = (first, most) > 0")
        self.reconnect = reconnect
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_backoff = reconnect_backoff
        #: Times the client reconnected after losing its connection.
        self.reconnects: int = 0
        self._connect_timeout = connect_timeout if connect_timeout is not None else timeout
        self._nodelay = nodelay
        self._sock = self._open_socket()
        # Reading: whoever holds _read_lock reads the socket and dispatches every answer it
        # finds. A synchronous call with the lock free reads its own answer on its own thread
        # (no hand-off); the reader thread reads only for requests nobody is waiting in.
        self._read_lock = threading.Lock()
        self._rbuf = bytearray(1 << 16)
        self._rstart = 0  # unread bytes are _rbuf[_rstart:_rend]
        self._rend = 0
        self._rcvtimeo = 0.0  # the socket's SO_RCVTIMEO in seconds (0: none)
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()  # guards everything below
        self._cv = threading.Condition(self._lock)  # the reader thread waits on it
        self._leading = False  # a caller holds _read_lock and reads
        # (function, parameters) -> (function id, hops, registry row), for submit().
        self._plans: dict[object, tuple[int, tuple[Hop, ...], FunctionSpec | None]] = {}
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._closed: OffracError | None = None
        self._last_unmatched: OffracError | None = None
        self._timer: _Timer | None = None
        self._rng = random.Random()
        self._user_closed = False
        self._reconnect_lock = threading.Lock()
        self._leader_thread: int | None = None
        # Set by _led around its own send: that request's future is a _LedFuture.
        self._led_send = False
        # Some request was given an out= array: answers may be read straight into one.
        self._outs = False
        #: Answers read from the socket straight into their ``out`` array.
        self.direct_reads: int = 0
        self._reader = self._start_reader()
        self._hello()

    def _hello(self) -> None:
        """Attribute the connection to ``tenant`` (if a key was given); waits for the answer so
        that no request is sent before the connection is the tenant's."""
        if self._key is None:
            return
        try:
            self.control(tenant=self.tenant, key=self._key).hello()
        except BaseException:
            self.close()
            raise

    def _open_socket(self) -> socket.socket:
        try:
            sock = socket.create_connection(self.address, timeout=self._connect_timeout)
        except OSError as e:
            where = f"{self.address[0]}:{self.address[1]}"
            raise ConnectError(f"cannot connect to {where}: {e.strerror or e}") from e
        sock.settimeout(None)
        if self._nodelay:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _check_alive(self) -> None:
        """An idle connection nobody reads: has the node closed it? (One non-blocking peek;
        only with ``reconnect``, so that the call after a node restart reconnects instead of
        failing.)"""
        if self._pending or not self._read_lock.acquire(blocking=False):
            return  # someone reads (or will): a loss shows there
        try:
            if self._rend > self._rstart:
                return  # unread answers: alive enough
            try:
                gone = self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
        finally:
            self._read_lock.release()
        if gone:
            self._shutdown(ConnectionClosedError("the node closed the connection"))

    def _start_reader(self) -> threading.Thread:
        t = threading.Thread(target=self._read_loop, name=f"offrac-reader-{self.address}", daemon=True)
        t.start()
        return t

    def _ensure_open(self) -> None:
        """With ``reconnect=True``, a client whose connection was lost connects again before
        its next request (jittered exponential back-off between attempts; ConnectError when
        every attempt fails). Requests outstanding at the loss failed with
        ConnectionClosedError; they are never re-sent (they may have run)."""
        if not self.reconnect or self._user_closed:
            return
        if self._closed is None:
            self._check_alive()
            if self._closed is None:
                return
        if self._leader_thread == threading.get_ident():
            return  # reading on this thread right now: the send reports the closed connection
        with self._reconnect_lock:
            if self._closed is None or self._user_closed:
                return
            self._reader.join(timeout=5)  # it ends once it sees the connection closed
            with self._read_lock:
                delay, most = self.reconnect_backoff
                for attempt in range(self.reconnect_attempts):
                    try:
                        sock = self._open_socket()
                        break
                    except ConnectError:
                        if attempt + 1 == self.reconnect_attempts:
                            raise
                        time.sleep(self._rng.uniform(0.5, 1.0) * min(delay * 2.0**attempt, most))
                with contextlib.suppress(OSError):
                    self._sock.close()
                self._sock = sock
                self._rstart = self._rend = 0
                self._rcvtimeo = 0.0
                with self._lock:
                    self._closed = None
                    self._last_unmatched = None
                self.reconnects += 1
            self._reader = self._start_reader()
        self._hello()

    # -- public API -----------------------------------------------------------------------

    # BEGIN GENERATED OVERLOADS submit (python/tools/gen_overloads.py)
    @overload
    def submit(
        self,
        function: Literal["echo"],
        data: BytesInput = ...,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[bytes]: ...
    @overload
    def submit(
        self,
        function: Literal["echo"],
        data: BytesInput = ...,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[bytes, ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["topk"],
        data: IntInput,
        *,
        k: int,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.int32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.int32]]: ...
    @overload
    def submit(
        self,
        function: Literal["topk"],
        data: IntInput,
        *,
        k: int,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.int32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.int32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["logit"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.float32]]: ...
    @overload
    def submit(
        self,
        function: Literal["logit"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.float32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["minmax"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.float32]]: ...
    @overload
    def submit(
        self,
        function: Literal["minmax"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.float32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["matmul"],
        data: MatmulInput,
        *,
        n: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.float32]]: ...
    @overload
    def submit(
        self,
        function: Literal["matmul"],
        data: MatmulInput,
        *,
        n: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.float32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["spin"],
        data: BytesInput = ...,
        *,
        us: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[bytes]: ...
    @overload
    def submit(
        self,
        function: Literal["spin"],
        data: BytesInput = ...,
        *,
        us: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[bytes, ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["mapid"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.uint32]]: ...
    @overload
    def submit(
        self,
        function: Literal["mapid"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.uint32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["sparsetransform"],
        data: FloatInput,
        *,
        cols: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[CSR]: ...
    @overload
    def submit(
        self,
        function: Literal["sparsetransform"],
        data: FloatInput,
        *,
        cols: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[CSR, ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["bucketize"],
        data: FloatInput,
        *,
        set: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.uint32]]: ...
    @overload
    def submit(
        self,
        function: Literal["bucketize"],
        data: FloatInput,
        *,
        set: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.uint32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["sigridhash"],
        data: IntInput,
        *,
        max_value: int,
        salt: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.uint32]]: ...
    @overload
    def submit(
        self,
        function: Literal["sigridhash"],
        data: IntInput,
        *,
        max_value: int,
        salt: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.uint32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["firstx"],
        data: RaggedInput,
        *,
        x: int,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[Ragged]: ...
    @overload
    def submit(
        self,
        function: Literal["firstx"],
        data: RaggedInput,
        *,
        x: int,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[Ragged, ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["idlisttransform"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[Ragged]: ...
    @overload
    def submit(
        self,
        function: Literal["idlisttransform"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[Ragged, ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["cartesian"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[Ragged]: ...
    @overload
    def submit(
        self,
        function: Literal["cartesian"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[Ragged, ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["ngram"],
        data: RaggedInput,
        *,
        n: int,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[Ragged]: ...
    @overload
    def submit(
        self,
        function: Literal["ngram"],
        data: RaggedInput,
        *,
        n: int,
        tenant: int | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[Ragged, ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["getlocalhour"],
        data: IntInput,
        *,
        utc_offset_s: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.uint32]]: ...
    @overload
    def submit(
        self,
        function: Literal["getlocalhour"],
        data: IntInput,
        *,
        utc_offset_s: int = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.uint32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["onehot"],
        data: IntInput,
        *,
        classes: int,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.float32]]: ...
    @overload
    def submit(
        self,
        function: Literal["onehot"],
        data: IntInput,
        *,
        classes: int,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.float32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["boxcox"],
        data: FloatInput,
        *,
        lmbda: float = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.float32]]: ...
    @overload
    def submit(
        self,
        function: Literal["boxcox"],
        data: FloatInput,
        *,
        lmbda: float = ...,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.float32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["cnn"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.float32]]: ...
    @overload
    def submit(
        self,
        function: Literal["cnn"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.float32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: Literal["gemv"],
        data: FloatInput,
        *,
        cols: int,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> RequestFuture[npt.NDArray[np.float32]]: ...
    @overload
    def submit(
        self,
        function: Literal["gemv"],
        data: FloatInput,
        *,
        cols: int,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> RequestFuture[tuple[npt.NDArray[np.float32], ResponseHeader]]: ...
    @overload
    def submit(
        self,
        function: int,
        data: Data = ...,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[Any] | None = ...,
        return_info: bool = ...,
        **params: object,
    ) -> RequestFuture[Any]: ...
    @overload
    def submit(
        self,
        function: str,
        data: Data = ...,
        *,
        tenant: int | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[Any] | None = ...,
        return_info: bool = ...,
        param: int = ...,
    ) -> RequestFuture[Any]: ...
    # END GENERATED OVERLOADS submit
    def submit(
        self,
        function: str | int,
        data: Data = b"",
        *,
        tenant: int | None = None,
        return_info: bool = False,
        budget: float | None = -1.0,
        out: npt.NDArray[Any] | None = None,
        **params: object,
    ) -> RequestFuture[Any]:
        """Send a request without waiting; returns a future of what :meth:`call` would return.

        Input/parameter errors (``TypeError``/``ValueError``) are raised here, before sending.
        The future fails with an :class:`~offrac.errors.OffracError` subclass for a non-OK
        status (after BUSY retries) or :class:`~offrac.errors.ConnectionClosedError`. Future
        callbacks run on the thread that reads the answer: the client's reader thread, or a
        thread waiting in a synchronous call on the same client.
        """
        self._ensure_open()
        # A function and its parameters are checked and encoded once per client: later calls
        # with the same ones reuse the hop (a few µs per call).
        try:
            # Types in the key: True == 1 and 1.0 == 1, but only 1 is a valid k.
            key: object = (
                (function, tuple(params.items()), tuple(map(type, params.values()))) if params else function
            )
            plan = self._plans.get(key)
        except TypeError:  # an unhashable parameter value
            key, plan = None, None
        if plan is None:
            step = Step(function, **params)
            plan = (step.function, (step.hop(),), _spec(step.function))
            if key is not None and len(self._plans) < _PLANS_MAX:
                self._plans[key] = plan
        fid, hops, spec = plan
        if spec is None or fid == FunctionId.MATMUL:
            # Functions this client does not know, and matmul's matrix pairs: the general path.
            step = Step(fid, param=hops[0].param)
            return self.submit_chain(
                [step], data, tenant=tenant, return_info=return_info, budget=budget, out=out
            )
        payload, shape = encode_input(spec, data)
        decode = output_decoder(fid, shape if fid in _ELEMENTWISE else None)
        if out is not None:
            out = check_out(fid, out)
        return self._send_new(hops, payload, tenant, decode, return_info, self.busy_retries, budget, out)

    def submit_chain(
        self,
        steps: Sequence[StepLike],
        data: Data = b"",
        *,
        tenant: int | None = None,
        return_info: bool = False,
        budget: float | None = -1.0,
        out: npt.NDArray[Any] | None = None,
    ) -> RequestFuture[Any]:
        """Like :meth:`call_chain` but returns a future."""
        self._ensure_open()
        payload, hops, decode = prepare_chain(steps, data)
        if out is not None:
            out = check_out(hops[-1].function, out)
        return self._send_new(hops, payload, tenant, decode, return_info, self.busy_retries, budget, out)

    def call_chain(
        self,
        steps: Sequence[StepLike],
        data: Data = b"",
        *,
        tenant: int | None = None,
        timeout: float | None = -1.0,
        return_info: bool = False,
        budget: float | None = -1.0,
        out: npt.NDArray[Any] | None = None,
    ) -> Any:
        """Run a chain of functions in one request: each step's output is the next one's input.

        ``steps`` are function names or ids, or :class:`Step` for a function with parameters
        (``[Step("topk", k=64), "logit"]``); 1 to 8 steps (more than 4 ride in the header's hop
        extension). ``data`` is encoded for the first
        step, the result decoded for the last. A failing step raises the typed error of its
        status with ``err.hop`` = the step's index, and no later step runs.
        """
        return self._led(
            lambda: self.submit_chain(
                steps, data, tenant=tenant, return_info=return_info, budget=budget, out=out
            ),
            timeout,
        )

    # BEGIN GENERATED OVERLOADS call (python/tools/gen_overloads.py)
    @overload
    def call(
        self,
        function: Literal["echo"],
        data: BytesInput = ...,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> bytes: ...
    @overload
    def call(
        self,
        function: Literal["echo"],
        data: BytesInput = ...,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[bytes, ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["topk"],
        data: IntInput,
        *,
        k: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.int32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.int32]: ...
    @overload
    def call(
        self,
        function: Literal["topk"],
        data: IntInput,
        *,
        k: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.int32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.int32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["logit"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    def call(
        self,
        function: Literal["logit"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["minmax"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    def call(
        self,
        function: Literal["minmax"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["matmul"],
        data: MatmulInput,
        *,
        n: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    def call(
        self,
        function: Literal["matmul"],
        data: MatmulInput,
        *,
        n: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["spin"],
        data: BytesInput = ...,
        *,
        us: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> bytes: ...
    @overload
    def call(
        self,
        function: Literal["spin"],
        data: BytesInput = ...,
        *,
        us: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[bytes, ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["mapid"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.uint32]: ...
    @overload
    def call(
        self,
        function: Literal["mapid"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.uint32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["sparsetransform"],
        data: FloatInput,
        *,
        cols: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> CSR: ...
    @overload
    def call(
        self,
        function: Literal["sparsetransform"],
        data: FloatInput,
        *,
        cols: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[CSR, ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["bucketize"],
        data: FloatInput,
        *,
        set: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.uint32]: ...
    @overload
    def call(
        self,
        function: Literal["bucketize"],
        data: FloatInput,
        *,
        set: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.uint32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["sigridhash"],
        data: IntInput,
        *,
        max_value: int,
        salt: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.uint32]: ...
    @overload
    def call(
        self,
        function: Literal["sigridhash"],
        data: IntInput,
        *,
        max_value: int,
        salt: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.uint32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["firstx"],
        data: RaggedInput,
        *,
        x: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> Ragged: ...
    @overload
    def call(
        self,
        function: Literal["firstx"],
        data: RaggedInput,
        *,
        x: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[Ragged, ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["idlisttransform"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> Ragged: ...
    @overload
    def call(
        self,
        function: Literal["idlisttransform"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[Ragged, ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["cartesian"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> Ragged: ...
    @overload
    def call(
        self,
        function: Literal["cartesian"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[Ragged, ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["ngram"],
        data: RaggedInput,
        *,
        n: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> Ragged: ...
    @overload
    def call(
        self,
        function: Literal["ngram"],
        data: RaggedInput,
        *,
        n: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[Ragged, ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["getlocalhour"],
        data: IntInput,
        *,
        utc_offset_s: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.uint32]: ...
    @overload
    def call(
        self,
        function: Literal["getlocalhour"],
        data: IntInput,
        *,
        utc_offset_s: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.uint32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.uint32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["onehot"],
        data: IntInput,
        *,
        classes: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    def call(
        self,
        function: Literal["onehot"],
        data: IntInput,
        *,
        classes: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["boxcox"],
        data: FloatInput,
        *,
        lmbda: float = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    def call(
        self,
        function: Literal["boxcox"],
        data: FloatInput,
        *,
        lmbda: float = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["cnn"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    def call(
        self,
        function: Literal["cnn"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: Literal["gemv"],
        data: FloatInput,
        *,
        cols: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    def call(
        self,
        function: Literal["gemv"],
        data: FloatInput,
        *,
        cols: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[np.float32] | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    def call(
        self,
        function: int,
        data: Data = ...,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[Any] | None = ...,
        return_info: bool = ...,
        **params: object,
    ) -> Any: ...
    @overload
    def call(
        self,
        function: str,
        data: Data = ...,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        out: npt.NDArray[Any] | None = ...,
        return_info: bool = ...,
        param: int = ...,
    ) -> Any: ...
    # END GENERATED OVERLOADS call
    def call(
        self,
        function: str | int,
        data: Data = b"",
        *,
        tenant: int | None = None,
        timeout: float | None = -1.0,
        return_info: bool = False,
        budget: float | None = -1.0,
        out: npt.NDArray[Any] | None = None,
        **params: object,
    ) -> Any:
        """Run ``function`` (name or id) on ``data`` and return its decoded result.

        Parameters: ``k=`` for topk, ``n=`` for matmul (optional), ``us=`` for spin, or the raw
        u64 ``param=`` for any function. Results: topk -> int32 array, logit/minmax -> float32
        array (shaped like a numpy input), matmul -> n x n float32 array, echo/spin/other -> bytes.
        With ``return_info=True`` returns ``(result, ResponseHeader)``; the header carries the
        node's ``reassembly_ns``, ``queue_ns`` and ``exec_ns``.

        ``timeout`` defaults to the client's; on expiry the request is abandoned and the
        builtin :class:`TimeoutError` is raised.

        ``out``: a writeable C-contiguous array of the result's dtype and size (functions
        returning arrays): the answer is read from the socket straight into it, no copy on
        the way, and ``out`` itself is returned (its shape kept). An answer of another size
        raises ValueError and writes nothing. Once such a payload starts arriving the read
        completes, even past the timeout.
        """
        return self._led(
            lambda: self.submit(
                function, data, tenant=tenant, return_info=return_info, budget=budget, out=out, **params
            ),
            timeout,
        )

    def call_pipeline(
        self,
        name: str,
        data: Data = b"",
        *,
        etcd: str = "127.0.0.1:2379",
        prefix: str = "/offrac",
        tenant: int | None = None,
        timeout: float | None = -1.0,
        return_info: bool = False,
        budget: float | None = -1.0,
    ) -> Any:
        """Run the named pipeline stored in the cluster store (see :mod:`offrac.cluster`) on
        ``data``: like :meth:`call_chain` with the pipeline's steps (fetched on each call)."""
        from .cluster import get_pipeline

        steps = get_pipeline(name, etcd=etcd, prefix=prefix)
        return self.call_chain(
            steps, data, tenant=tenant, timeout=timeout, return_info=return_info, budget=budget
        )

    def describe(self, timeout: float | None = -1.0) -> dict[str, Any]:
        """What the node serves: ``{"device", "version", "functions": [{"id", "name", "slots"}],
        "slots": [...], "peers": [{"device", "addr", "up"}], "metrics", "max_payload", ...}``
        (``docs/protocol.md``, "Describe"). Also a ping."""
        header, payload = self.call_raw(FN_DESCRIBE, b"", 0, timeout=timeout)
        if header.status != Status.OK:
            raise error_for_response(header, payload)
        description: dict[str, Any] = json.loads(payload)
        return description

    def control(self, *, tenant: int, key: bytes) -> Controller:
        """A :class:`~offrac.control.Controller` sending control requests (upload a WebAssembly
        module, swap a slot's function, list, unload; ``docs/control.md``) on this connection,
        signed with ``tenant``'s HMAC-SHA256 ``key``."""
        from .control import Controller

        return Controller(self, tenant=tenant, key=key)

    def register_reply(self, endpoint: int | None = None, *, tenant: int | None = None) -> int:
        """Make this connection a reply endpoint on its node and return its id: requests sent
        on any connection to the node with ``RequestHeader.reply_device`` = that id get their
        answers here (raw framing; this client's own calls are unaffected). Direct replies
        (``FLAG_DIRECT_REPLY``) are delivered here only for requests of the same ``tenant``
        (default: this client's)."""
        wanted = DEVICE_SELF if endpoint is None else endpoint
        header, payload = self.call_raw(FN_REGISTER_REPLY, b"", wanted, tenant=tenant)
        if header.status != Status.OK:
            raise error_for_response(header, payload)
        return header.detail

    def submit_raw(
        self,
        function: int,
        payload: bytes | bytearray | memoryview = b"",
        param: int = 0,
        *,
        tenant: int | None = None,
    ) -> RequestFuture[tuple[ResponseHeader, bytes]]:
        """Like :meth:`call_raw` but returns a future.

        The payload is not copied: it is written to the socket before this returns (a raw
        request is never re-sent), so the caller may reuse its buffer once it has."""
        self._ensure_open()
        hops = (Hop.local(function_id(function), _u64_param("param", param)),)
        return self._send_new(hops, _byte_view(payload), tenant, None, False, 0, -1.0)

    def call_raw(
        self,
        function: int,
        payload: bytes | bytearray | memoryview = b"",
        param: int = 0,
        *,
        tenant: int | None = None,
        timeout: float | None = -1.0,
    ) -> tuple[ResponseHeader, bytes]:
        """Send ``payload`` as-is and return ``(ResponseHeader, payload bytes)`` for *any* status.

        No BUSY retry and no exception for non-OK statuses: check ``header.status`` yourself.
        Raises :class:`~offrac.errors.ConnectionClosedError` if the connection closes first.
        """
        return self._led(lambda: self.submit_raw(function, payload, param, tenant=tenant), timeout)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def outstanding(self) -> int:
        """Requests sent (or waiting to be re-sent) and not yet answered."""
        with self._lock:
            return len(self._pending)

    def close(self) -> None:
        """Close the connection; outstanding requests fail with ConnectionClosedError."""
        self._user_closed = True
        self._shutdown(ConnectionClosedError("client closed the connection"))
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=5)
        # Nobody reads any more (or a reader is about to see the shut-down socket).
        with self._read_lock:
            self._sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<offrac.Client {self.address[0]}:{self.address[1]} {state}>"

    # -- internals --------------------------------------------------------------------------

    def _wait(self, fut: RequestFuture[_T], timeout: float | None) -> _T:
        if timeout is not None and timeout < 0:
            timeout = self.timeout
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            self._abandon(fut, timeout)
            raise AssertionError("unreachable") from None

    def _abandon(self, fut: RequestFuture[Any] | _LedFuture, timeout: float | None) -> None:
        fut.cancel()
        with self._lock:
            self._pending.pop(fut.request_id, None)
        raise TimeoutError(f"no response to request {fut.request_id} within {timeout} s") from None

    def _led(self, send: Callable[[], RequestFuture[_T]], timeout: float | None) -> _T:
        """Send with ``send`` and wait for the answer, reading the socket on this thread when
        no other thread is reading it (the common case of one caller): no thread hand-off."""
        if timeout is not None and timeout < 0:
            timeout = self.timeout
        self._ensure_open()
        if not self._read_lock.acquire(blocking=False):
            return self._wait(send(), timeout)  # another thread reads; it will dispatch ours
        self._leader_thread = threading.get_ident()
        with self._lock:
            self._leading = True
        try:
            self._led_send = True  # this send's future stays here: a light one will do
            try:
                fut: RequestFuture[_T] | _LedFuture = send()
            finally:
                self._led_send = False
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                while not fut.done():
                    frame = self._read_frame(deadline)
                    if frame is None:
                        break  # the deadline passed
                    self._dispatch(*frame)
            except _StreamEnd as e:
                self._shutdown(self._closing_reason(e.reason))
        finally:
            self._leader_thread = None
            with self._lock:
                self._leading = False
                if self._pending:
                    self._cv.notify()  # requests of other threads remain: the reader takes over
            self._read_lock.release()
        if not fut.done():
            if self._closed is None:
                self._abandon(fut, timeout)
            # Closed while we read: the closing thread is failing our request right now.
            return fut.result(timeout=5)
        return fut.result()

    def _send_new(
        self,
        hops: tuple[Hop, ...],
        payload: bytes | memoryview,
        tenant: int | None,
        decode: _Decoder | None,
        return_info: bool,
        retries: int,
        budget: float | None,
        out: npt.NDArray[Any] | None = None,
    ) -> RequestFuture[Any]:
        budget_us = _budget_us(self.budget if budget is not None and budget < 0 else budget)
        fut: RequestFuture[Any] | _LedFuture
        if self._led_send and self._leader_thread == threading.get_ident():
            self._led_send = False
            fut = _LedFuture()
        else:
            fut = RequestFuture()
        with self._lock:
            if self._closed is not None:
                raise ConnectionClosedError(f"connection is closed ({self._closed.message})")
            rid = next(self._ids)
            fut.request_id = rid
            tenant_id = self.tenant if tenant is None else tenant
            header = RequestHeader.encode_chain(
                rid, hops, len(payload), tenant_id, budget_us=budget_us, trace=self.trace
            )
            # Small requests leave as one buffer; large payloads as a second one (sendmsg).
            if len(payload) < _GATHER_MIN:
                pending = _Pending(fut, header + payload, decode, return_info, retries, out=out)
            else:
                pending = _Pending(fut, header, decode, return_info, retries, out=out, payload=payload)
            if out is not None:
                self._outs = True
            self._pending[rid] = pending
            if not self._leading:
                self._cv.notify()
        self._transmit(pending)
        if retries == 0:
            # Never re-sent: let go of the caller's buffer (a view of it would pin it).
            pending.payload = b""
        # A _LedFuture goes back to _led only (the caller of its send), never to a user.
        return cast(RequestFuture[Any], fut)

    def _transmit(self, pending: _Pending) -> None:
        try:
            with self._send_lock:
                if pending.payload:
                    _send_gather(self._sock, pending.wire, pending.payload)
                else:
                    self._sock.sendall(pending.wire)
        except OSError as e:
            self._shutdown(ConnectionClosedError(f"send failed: {e}"))

    def _resend(self, rid: int) -> None:
        with self._lock:
            pending = self._pending.get(rid)
            if pending is None or self._closed is not None:
                return
            if pending.future.cancelled():
                del self._pending[rid]
                return
        self._transmit(pending)

    def _backoff(self, attempt: int) -> float:
        lo, hi = self.busy_backoff
        return min(self._rng.uniform(lo, hi) * (2.0**attempt), self.busy_backoff_max)

    def _fill(self, n: int, deadline: float | None) -> bool:
        """Have at least ``n`` unread bytes buffered (False: the deadline passed first).
        Raises :class:`_StreamEnd` when the node closed the connection."""
        while self._rend - self._rstart < n:
            if self._rstart and self._rend == self._rstart:
                self._rstart = self._rend = 0
            if len(self._rbuf) - self._rstart < n:
                # Move what is unread to the front, and grow to fit a large answer.
                self._rbuf[: self._rend - self._rstart] = self._rbuf[self._rstart : self._rend]
                self._rend -= self._rstart
                self._rstart = 0
                if len(self._rbuf) < n:
                    self._rbuf.extend(bytes(n - len(self._rbuf)))
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._recv_timeout(left)
            elif self._rcvtimeo:
                self._recv_timeout(0.0)
            try:
                k = self._poll_read(deadline)
                if k < 0:
                    k = self._sock.recv_into(memoryview(self._rbuf)[self._rend :])
            except BlockingIOError:
                continue  # SO_RCVTIMEO expired: the deadline is checked above
            except OSError as e:
                raise _StreamEnd(f"connection error: {e}") from None
            if not k:
                raise _StreamEnd(
                    "the node closed the connection"
                    if self._rend == self._rstart
                    else "the node closed the connection mid-response"
                )
            self._rend += k
        return True

    def _poll_read(self, deadline: float | None) -> int:
        """With ``poll_us``, on a caller's thread (not the reader thread's): read without
        blocking, ``sched_yield`` between empty polls, for up to ``poll_us`` µs (and not past
        ``deadline``). The bytes read (0: the node closed), or -1: nothing came, block."""
        if not self.poll_us or threading.current_thread() is self._reader:
            return -1
        end = time.monotonic() + self.poll_us * 1e-6
        if deadline is not None:
            end = min(end, deadline)
        view = memoryview(self._rbuf)[self._rend :]
        while True:
            try:
                k = self._sock.recv_into(view, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if time.monotonic() >= end:
                    return -1
                os.sched_yield()
                continue
            self.polled_reads += 1
            return k

    def _recv_timeout(self, seconds: float) -> None:
        """Bound the next blocking ``recv`` by the kernel (``SO_RCVTIMEO``; 0: no bound)
        rather than a ``select`` before each read: one system call per read, not two. Set
        again only when it would let the read outlast the deadline by more than 1 ms, or
        wait far less than asked."""
        cur = self._rcvtimeo
        if seconds == 0.0 or cur == 0.0 or cur > seconds + 1e-3 or cur < 0.5 * seconds:
            if seconds == cur:
                return
            sec = int(seconds)
            usec = 0 if seconds == 0.0 else max(1, int((seconds - sec) * 1e6))
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", sec, usec))
            self._rcvtimeo = seconds

    def _take(self, n: int) -> bytearray:
        out = self._rbuf[self._rstart : self._rstart + n]
        self._rstart += n
        return out

    def _read_frame(self, deadline: float | None) -> tuple[ResponseHeader, bytearray] | None:
        """One whole answer, or None if the deadline passed first (what was read of it stays
        buffered for the next reader). Only the holder of ``_read_lock`` calls this."""
        if not self._fill(HEADER_LEN, deadline):
            return None
        try:
            header = ResponseHeader.decode_from(self._rbuf, self._rstart)
        except HeaderError as e:
            raise _StreamEnd(f"protocol error from the node: {e}") from None
        extra = 64 if header.has_hop_times else 0
        out = self._out_for(header) if self._outs else None
        if out is None and header.payload_len > self.max_answer_bytes:
            raise _StreamEnd(answer_too_large(header.payload_len, self.max_answer_bytes))
        if out is not None or header.payload_len >= DIRECT_READ_MIN:
            # Straight into the caller's array, or into the payload's own bytearray: no copy
            # of the payload in between. Once it has begun the read finishes (the stream must
            # stay whole), past the deadline too.
            if not self._fill(HEADER_LEN + extra, deadline):
                return None
            self._rstart += HEADER_LEN
            if extra:
                header = dataclasses.replace(header, hop_times=HopTime.decode_block(self._take(64)))
            if out is not None:
                self._read_into(memoryview(out).cast("B"))
                self.direct_reads += 1
                self.last_response = header
                return header, _IN_OUT
            payload = bytearray(header.payload_len)
            self._read_into(memoryview(payload))
            self.last_response = header
            return header, payload
        if not self._fill(HEADER_LEN + extra + header.payload_len, deadline):
            return None
        self._rstart += HEADER_LEN
        if extra:
            header = dataclasses.replace(header, hop_times=HopTime.decode_block(self._take(64)))
        payload = self._take(header.payload_len) if header.payload_len else bytearray()
        self.last_response = header
        return header, payload

    def _out_for(self, header: ResponseHeader) -> npt.NDArray[Any] | None:
        """The ``out`` array an OK answer of exactly its size is read into, if any."""
        if header.status != Status.OK:
            return None
        with self._lock:
            pending = self._pending.get(header.request_id)
        out = None if pending is None else pending.out
        return out if out is not None and out.nbytes == header.payload_len else None

    def _read_into(self, view: memoryview) -> None:
        """Fill ``view`` with the next payload bytes: what is buffered, then from the socket."""
        have = min(self._rend - self._rstart, len(view))
        view[:have] = self._rbuf[self._rstart : self._rstart + have]
        self._rstart += have
        if self._rcvtimeo:
            self._recv_timeout(0.0)
        while have < len(view):
            try:
                k = self._sock.recv_into(view[have:])
            except BlockingIOError:
                continue
            except OSError as e:
                raise _StreamEnd(f"connection error: {e}") from None
            if not k:
                raise _StreamEnd("the node closed the connection mid-response")
            have += k

    def _closing_reason(self, message: str) -> ConnectionClosedError:
        with self._lock:
            unmatched = self._last_unmatched
        if unmatched is not None and self._closed is None:
            return ConnectionClosedError(f"{message} after: {unmatched}")
        return ConnectionClosedError(message)

    def _read_loop(self) -> None:
        """The reader thread: reads while requests are outstanding and no caller reads."""
        while True:
            with self._cv:
                while self._closed is None and not (self._pending and not self._leading):
                    self._cv.wait()
                if self._closed is not None:
                    return
            with self._read_lock:
                try:
                    while True:
                        with self._lock:
                            if not self._pending or self._closed is not None:
                                break
                        frame = self._read_frame(None)
                        assert frame is not None  # no deadline
                        self._dispatch(*frame)
                except _StreamEnd as e:
                    self._shutdown(self._closing_reason(e.reason))
                    return

    def _dispatch(self, header: ResponseHeader, payload: bytearray) -> None:
        with self._lock:
            pending = self._pending.get(header.request_id)
            if pending is None:
                if header.status != Status.OK:
                    self._last_unmatched = error_for_response(header, payload)
                return
            if (
                header.status == Status.BUSY
                and pending.retries_left > 0
                and pending.decode is not None
                and not pending.future.cancelled()
            ):
                pending.retries_left -= 1
                delay = self._backoff(pending.attempt)
                pending.attempt += 1
                self.busy_retries_done += 1
                if self._timer is None:
                    self._timer = _Timer()
                timer = self._timer
                rid = header.request_id
                timer.schedule(delay, lambda: self._resend(rid))
                return
            del self._pending[header.request_id]
        fut = pending.future
        try:
            if pending.decode is None:
                value: Any = (header, bytes(payload))
            elif header.status != Status.OK:
                _set(fut, exc=error_for_response(header, payload))
                return
            else:
                result = pending.decode(payload) if pending.out is None else _into_out(pending.out, payload)
                value = (result, header) if pending.return_info else result
        except Exception as e:  # a decoder failure belongs to this request only
            _set(fut, exc=e)
            return
        _set(fut, value=value)

    def _shutdown(self, reason: OffracError) -> None:
        with self._lock:
            first = self._closed is None
            if first:
                self._closed = reason
            pending = list(self._pending.values())
            self._pending.clear()
            timer, self._timer = self._timer, None
            self._cv.notify_all()
        # Fail the outstanding requests before the socket goes: a call reading it wakes up
        # to find its request already answered with the reason.
        for p in pending:
            _set(
                p.future,
                exc=ConnectionClosedError(reason.message, request_id=p.future.request_id),
            )
        if first:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        if timer is not None:
            timer.stop()


def _into_out(out: npt.NDArray[Any], payload: bytearray) -> npt.NDArray[Any]:
    """``out`` holding the result: read into it already, or copied now."""
    if payload is _IN_OUT:
        return out
    if len(payload) != out.nbytes:
        raise ValueError(f"out has {out.nbytes} bytes, the result {len(payload)}: nothing written")
    memoryview(out).cast("B")[:] = payload
    return out


class _StreamEnd(Exception):
    """The answer stream ended: closed by the node, broken, or not our protocol."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _set(fut: concurrent.futures.Future[Any], *, value: Any = None, exc: BaseException | None = None) -> None:
    """Complete ``fut`` unless it was cancelled meanwhile."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass
