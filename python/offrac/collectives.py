"""Collectives across offrac nodes (``docs/collectives.md``), with mpi4py-like names.

Each rank talks to its own node; the nodes of the communicator move the data between
them. Every rank calls the same collectives in the same order (as with MPI): the
communicator numbers its calls, and that number (the tag) matches the calls up.

>>> from offrac.collectives import Communicator, SUM
>>> comm = Communicator("10.0.0.1:7000", members=[0, 1, 2, 3])   # doctest: +SKIP
>>> comm.allreduce(np.arange(4, dtype=np.float32), op=SUM)        # doctest: +SKIP
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from .buffers import create_buffer, drop_buffer
from .client import Client, Step
from .errors import BufferExistsError, OffracError, UnknownBufferError, error_for_response
from .protocol import Status

__all__ = [
    "CALL_FROM_BUFFER",
    "CALL_KEEP",
    "FN_COLLECTIVE",
    "MAX",
    "SUM",
    "Algorithm",
    "Communicator",
    "ReduceOp",
    "encode_call",
    "hop_param",
]

FN_COLLECTIVE = 251
DESCRIPTOR_LEN = 64


class _Kind(IntEnum):
    CALL = 1


class _Op(IntEnum):
    BCAST = 1
    REDUCE = 2
    ALLREDUCE = 3
    GATHER = 4
    SCATTER = 5


class ReduceOp(IntEnum):
    SUM = 1
    MAX = 2


SUM = ReduceOp.SUM
MAX = ReduceOp.MAX


class Algorithm(IntEnum):
    """Forced algorithm of a call (``AUTO``: the node picks by size and rank count)."""

    AUTO = 0
    ONE_TO_ALL = 1
    TREE = 2
    RING = 3
    RECURSIVE_DOUBLING = 4


_DTYPES: dict[np.dtype[Any], int] = {np.dtype(np.float32): 1, np.dtype(np.int32): 2}


def _dtype_code(dtype: npt.DTypeLike) -> int:
    d = np.dtype(dtype)
    if d not in _DTYPES:
        raise TypeError(f"collectives take float32 or int32 arrays, not {d}")
    return _DTYPES[d]


def _members_mask(members: Sequence[int]) -> bytes:
    mask = bytearray(32)
    for d in members:
        if not 0 <= d <= 254:
            raise ValueError(f"device id {d} is out of range 0..=254")
        mask[d // 8] |= 1 << (d % 8)
    return bytes(mask)


#: Byte 7 of a call's descriptor: the input is the named buffer in ``param`` bits 0-31.
CALL_FROM_BUFFER = 1
#: Byte 7 of a call's descriptor: keep the output in the named buffer in ``param`` bits 32-63.
CALL_KEEP = 2


def _buffer_name(name: int | None) -> int:
    if name is None:
        return 0
    if isinstance(name, bool) or not isinstance(name, int) or not 0 <= name <= 0xFFFF_FFFF:
        raise ValueError(f"a buffer name is an int in 0..=2**32-1, not {name!r}")
    return name


def hop_param(descriptor: int, tag: int) -> int:
    """The ``param`` of a collective hop (``docs/protocol.md``, "Collective hops"): the named
    buffer holding the call's descriptor in bits 0-31, the number added to its tag in bits
    32-63."""
    if not 0 <= tag <= 0xFFFF_FFFF:
        raise ValueError(f"a collective hop's tag is 0..=2**32-1, not {tag}")
    return _buffer_name(descriptor) | tag << 32


def _parse_op(op: str) -> _Op:
    try:
        return _Op[op.upper()]
    except KeyError:
        raise ValueError(f"unknown collective {op!r}: bcast, reduce, allreduce, gather or scatter") from None


def encode_call(
    op: int,
    dtype_code: int,
    redop: int,
    root: int,
    algorithm: int,
    tag: int,
    count: int,
    timeout_ms: int,
    members: Sequence[int],
    buffers: int = 0,
) -> bytes:
    """The 64-byte descriptor of a call (``docs/protocol.md``, "Collectives"); ``buffers``:
    byte 7, bit 0 the input comes from a named buffer, bit 1 the output is kept in one."""
    return struct.pack(
        "<BBBBBBBBQIIII",
        _Kind.CALL,
        op,
        dtype_code,
        redop,
        root,
        algorithm,
        0,
        buffers,
        tag,
        count,
        0,
        0,
        timeout_ms,
    ) + _members_mask(members)


#: How many names :meth:`Communicator.hop` tries before it gives up.
_HOP_NAME_TRIES = 1024


class Communicator:
    """The ranks ``members`` (device ids; rank = position in increasing id order), seen
    from the node at ``address`` (this rank's node, device ``device`` — asked from the
    node when not given). ``timeout``: each collective's deadline, in seconds. ``first_tag``:
    the tag of the first call (every rank the same); a node refuses a tag used on the same
    members in the last 30 s, so a new communicator on the same members starts past the
    tags of the previous one. ``poll_us``: the client it opens polls for its answers that
    long before it blocks (:class:`~offrac.client.Client`'s ``poll_us``, as MPI's ranks
    poll and yield); ignored when ``address`` is a client. ``hop_buffers``: the first name
    :meth:`hop` tries for the named buffers it keeps its descriptors in on this rank's node;
    it claims each name with a buffer ``CREATE`` and skips names already kept, so several
    communicators (or other clients) of one tenant on one node never share a name."""

    def __init__(
        self,
        address: str | Client,
        members: Sequence[int],
        *,
        device: int | None = None,
        timeout: float = 10.0,
        first_tag: int = 1,
        poll_us: int = 0,
        hop_buffers: int = 0xC011_0000,
    ) -> None:
        self._own = not isinstance(address, Client)
        self.client: Client = (
            Client(address, timeout=timeout + 5, poll_us=poll_us) if isinstance(address, str) else address
        )
        self.members: list[int] = sorted(set(members))
        if device is None:
            device = int(self.client.describe()["device"])
        if device not in self.members:
            raise ValueError(f"device {device} is not one of the members {self.members}")
        self.device: int = device
        self.rank: int = self.members.index(device)
        self.size: int = len(self.members)
        self.timeout_ms: int = max(1, int(timeout * 1000))
        self.tag: int = first_tag
        self.last_algorithm: Algorithm | None = None
        self.hop_buffers: int = _buffer_name(hop_buffers)
        self._hop_names: dict[bytes, int] = {}
        self._next_hop_name: int = self.hop_buffers

    def close(self) -> None:
        """Drop the descriptor buffers :meth:`hop` kept on the node (a node that cannot be
        reached any more is not asked again), then close the client if the communicator
        opened it. Chains that name those buffers fail ``UNKNOWN_BUFFER`` afterwards."""
        names = list(self._hop_names.values())
        self._hop_names.clear()
        try:
            for name in names:
                try:
                    drop_buffer(self.client, name)
                except UnknownBufferError:
                    continue  # dropped already (e.g. by the caller)
                except (ConnectionError, TimeoutError):
                    break
        finally:
            if self._own:
                self.client.close()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            self.close()
        except OffracError:
            if exc_type is None:
                raise  # else the exception that ends the block is the one to see

    def _call(
        self,
        op: _Op,
        data: npt.NDArray[Any] | None,
        dtype: npt.DTypeLike,
        count: int,
        redop: int = 0,
        root: int = 0,
        algorithm: Algorithm = Algorithm.AUTO,
        source: int | None = None,
        keep: int | None = None,
    ) -> npt.NDArray[Any]:
        tag = self.tag
        self.tag += 1
        code = _dtype_code(dtype)
        flags = (CALL_FROM_BUFFER if source is not None else 0) | (CALL_KEEP if keep is not None else 0)
        param = _buffer_name(source) | _buffer_name(keep) << 32
        desc = encode_call(op, code, redop, root, algorithm, tag, count, self.timeout_ms, self.members, flags)
        if data is None:
            request = desc
        else:
            # The descriptor and the data in one buffer, the data copied once.
            arr = np.ascontiguousarray(data, dtype=dtype)
            buf = bytearray(len(desc) + arr.nbytes)
            buf[: len(desc)] = desc
            np.frombuffer(buf, dtype=np.uint8, offset=len(desc))[:] = arr.reshape(-1).view(np.uint8)
            request = buf
        header, payload = self.client.call_raw(
            FN_COLLECTIVE, request, param, timeout=self.timeout_ms / 1000 + 5
        )
        if header.status != Status.OK:
            raise error_for_response(header, payload)
        self.last_algorithm = Algorithm(header.detail)
        # The answer's bytes are the caller's own (a writable array, not a copy of them).
        owned = payload if isinstance(payload, bytearray) else bytearray(payload)
        return np.frombuffer(owned, dtype=np.dtype(dtype))

    def run(
        self,
        op: str,
        *,
        dtype: npt.DTypeLike,
        count: int,
        data: npt.ArrayLike | None = None,
        source: int | None = None,
        keep: int | None = None,
        redop: ReduceOp = SUM,
        root: int = 0,
        algorithm: Algorithm = Algorithm.AUTO,
    ) -> npt.NDArray[Any] | None:
        """One collective (``op``: ``"bcast"``, ``"reduce"``, ``"allreduce"``, ``"gather"``,
        ``"scatter"``) of ``count`` elements of ``dtype`` per rank, its input and output
        optionally in named buffers on this rank's node (``offrac.buffers``):
        ``source=NAME`` takes the input from buffer NAME instead of ``data`` (it stays);
        ``keep=NAME`` keeps this rank's output there and returns None, so a later chain can
        read it (``offrac.buffers.load``) without it crossing the network. Otherwise returns
        this rank's output, flat (empty where MPI gives nothing)."""
        o = _parse_op(op)
        if source is not None and data is not None:
            raise ValueError("pass data= or source=, not both")
        red = int(redop) if o in (_Op.REDUCE, _Op.ALLREDUCE) else 0
        out = self._call(
            o, None if data is None else np.asarray(data), dtype, count, red, root, algorithm, source, keep
        )
        return None if keep is not None else out

    def hop(
        self,
        op: str,
        *,
        dtype: npt.DTypeLike,
        count: int,
        redop: ReduceOp = SUM,
        root: int = 0,
        algorithm: Algorithm = Algorithm.AUTO,
    ) -> Step:
        """A chain step that runs one collective at this rank's node (``docs/collectives.md``,
        "Collectives in a chain"): its input is the step's input (the chain's data or the
        previous step's output), its output (this rank's, as :meth:`run` returns it) goes on
        to the next step or is the chain's answer. So one call per rank runs e.g.
        ``[comm.hop("scatter", ...), load(A), Step("gemv", cols=k), comm.hop("reduce", ...)]``
        at the nodes. Each call takes the communicator's next tag, like :meth:`run`: build
        the steps anew for every chain, in the same order on every rank. The call's
        descriptor is kept once per distinct collective as a named buffer on the node (names
        from ``hop_buffers``) until :meth:`close`; the step's ``param`` names it and the tag."""
        o = _parse_op(op)
        red = int(redop) if o in (_Op.REDUCE, _Op.ALLREDUCE) else 0
        desc = encode_call(
            o, _dtype_code(dtype), red, root, algorithm, 0, count, self.timeout_ms, self.members
        )
        name = self._hop_names.get(desc)
        if name is None:
            name = self._claim_hop_name(desc)
            self._hop_names[desc] = name
        tag = self.tag
        self.tag += 1
        return Step(FN_COLLECTIVE, param=hop_param(name, tag))

    def _claim_hop_name(self, desc: bytes) -> int:
        """Keep ``desc`` under the next name from ``hop_buffers`` that nobody of this tenant
        keeps on the node (a ``CREATE`` per try, so a name another client holds is never
        overwritten)."""
        for _ in range(_HOP_NAME_TRIES):
            name = _buffer_name(self._next_hop_name)
            self._next_hop_name += 1
            try:
                create_buffer(self.client, name, desc)
                return name
            except BufferExistsError:
                continue
        raise ValueError(
            f"{_HOP_NAME_TRIES} names from {self._next_hop_name - _HOP_NAME_TRIES:#x} on are kept on the "
            "node already; pass another hop_buffers"
        )

    def allreduce(
        self, data: npt.ArrayLike, op: ReduceOp = SUM, *, algorithm: Algorithm = Algorithm.AUTO
    ) -> npt.NDArray[Any]:
        """Every rank gets the element-wise reduction of every rank's ``data``."""
        a = np.asarray(data)
        return self._call(_Op.ALLREDUCE, a, a.dtype, a.size, op, 0, algorithm).reshape(a.shape)

    def reduce(
        self,
        data: npt.ArrayLike,
        op: ReduceOp = SUM,
        root: int = 0,
        *,
        algorithm: Algorithm = Algorithm.AUTO,
    ) -> npt.NDArray[Any] | None:
        """The root gets the reduction; other ranks get None."""
        a = np.asarray(data)
        out = self._call(_Op.REDUCE, a, a.dtype, a.size, op, root, algorithm)
        return out.reshape(a.shape) if self.rank == root else None

    def bcast(
        self,
        data: npt.ArrayLike | None,
        root: int = 0,
        *,
        count: int | None = None,
        dtype: npt.DTypeLike = None,
        algorithm: Algorithm = Algorithm.AUTO,
    ) -> npt.NDArray[Any]:
        """Every rank gets the root's ``data``. Other ranks pass an array of the same
        size and type (ignored) or ``count=`` and ``dtype=``."""
        if data is not None:
            a = np.asarray(data)
            send = a if self.rank == root else None
            return self._call(_Op.BCAST, send, a.dtype, a.size, 0, root, algorithm).reshape(a.shape)
        if self.rank == root or count is None or dtype is None:
            raise ValueError("the root passes data; other ranks pass data or count= and dtype=")
        return self._call(_Op.BCAST, None, dtype, count, 0, root, algorithm)

    def gather(
        self, data: npt.ArrayLike, root: int = 0, *, algorithm: Algorithm = Algorithm.AUTO
    ) -> npt.NDArray[Any] | None:
        """The root gets every rank's ``data`` stacked in rank order (shape ``(size, *data.shape)``)."""
        a = np.asarray(data)
        out = self._call(_Op.GATHER, a, a.dtype, a.size, 0, root, algorithm)
        return out.reshape((self.size, *a.shape)) if self.rank == root else None

    def scatter(
        self,
        data: npt.ArrayLike | None,
        root: int = 0,
        *,
        count: int | None = None,
        dtype: npt.DTypeLike = None,
    ) -> npt.NDArray[Any]:
        """Rank r gets block r of the root's ``data`` (its first axis has ``size`` blocks);
        other ranks pass ``count=`` (elements per block) and ``dtype=``."""
        if self.rank == root:
            if data is None:
                raise ValueError("the root passes the data to scatter")
            a = np.asarray(data)
            if a.shape[0] != self.size:
                raise ValueError(
                    f"the root's data has {a.shape[0]} blocks, the communicator {self.size} ranks"
                )
            out = self._call(_Op.SCATTER, a, a.dtype, a[0].size, 0, root)
            return out.reshape(a.shape[1:])
        if count is None or dtype is None:
            raise ValueError("ranks other than the root pass count= and dtype=")
        return self._call(_Op.SCATTER, None, dtype, count, 0, root)
