"""Named buffers (``docs/protocol.md``, "Named buffers"): data kept on a node between calls.

A chain step for function ``255`` (``FN_BUFFER``) keeps its input on the node under a 32-bit
name, or reads a kept buffer as the next step's input, so data that already sits at a node
does not cross the network again:

>>> from offrac.buffers import keep, load
>>> client.call_chain([keep(7)], matrix)                       # doctest: +SKIP
>>> client.call_chain([load(7), Step("gemv", cols=n)], x)      # doctest: +SKIP

Buffers belong to the connection's tenant (anonymous connections share one class) and live
until dropped, replaced or the node stops; the node's budget (``[named_buffers] max_bytes``)
and a tenant's ``max_buffer_bytes`` bound them (``QuotaExceededError``); reading a name that
is not there raises ``UnknownBufferError``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

import numpy as np
import numpy.typing as npt

from .client import Client, Step
from .protocol import DEVICE_SELF

__all__ = [
    "FN_BUFFER",
    "BufferOp",
    "buffer_param",
    "create",
    "create_buffer",
    "drop",
    "drop_buffer",
    "get_buffer",
    "keep",
    "load",
    "put_buffer",
    "tee",
]

#: The node function of named buffers.
FN_BUFFER: Final = 0xFF
_NAME_MAX: Final = 0xFFFF_FFFF


class BufferOp(IntEnum):
    """What a buffer step does (``param`` bits 32-39)."""

    PUT = 1  #: keep the input under the name; output empty
    TEE = 2  #: keep a copy of the input; output the input
    GET = 3  #: output the buffer's bytes followed by the input
    DROP = 4  #: remove the buffer; output empty
    CREATE = 5  #: keep the input under a name not yet kept (else BUFFER_EXISTS); output empty


def buffer_param(op: BufferOp, name: int) -> int:
    """The hop ``param`` of a buffer step: the operation in bits 32-39, the name in bits 0-31."""
    if isinstance(name, bool) or not isinstance(name, int) or not 0 <= name <= _NAME_MAX:
        raise ValueError(f"a buffer name is an int in 0..=2**32-1, not {name!r}")
    return (int(op) << 32) | name


def _step(op: BufferOp, name: int, device: int) -> Step:
    return Step(FN_BUFFER, device=device, param=buffer_param(op, name))


def keep(name: int, *, device: int = DEVICE_SELF) -> Step:
    """A step keeping its input under ``name`` (replacing a buffer of that name); output empty."""
    return _step(BufferOp.PUT, name, device)


def create(name: int, *, device: int = DEVICE_SELF) -> Step:
    """A step keeping its input under ``name`` if the tenant keeps no buffer of that name
    (else the chain fails ``BufferExistsError``, nothing changed); output empty."""
    return _step(BufferOp.CREATE, name, device)


def tee(name: int, *, device: int = DEVICE_SELF) -> Step:
    """A step keeping a copy of its input under ``name`` and passing the input on."""
    return _step(BufferOp.TEE, name, device)


def load(name: int, *, device: int = DEVICE_SELF) -> Step:
    """A step whose output is buffer ``name``'s bytes followed by its own input."""
    return _step(BufferOp.GET, name, device)


def drop(name: int, *, device: int = DEVICE_SELF) -> Step:
    """A step removing buffer ``name``; output empty."""
    return _step(BufferOp.DROP, name, device)


_Data = bytes | bytearray | memoryview | npt.NDArray[np.generic]


def _raw(data: _Data) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    return np.ascontiguousarray(data).tobytes()


def put_buffer(client: Client, name: int, data: _Data) -> None:
    """Keep ``data`` (bytes, or a numpy array's bytes) on ``client``'s node under ``name``."""
    client.call_chain([keep(name)], _raw(data))


def create_buffer(client: Client, name: int, data: _Data) -> None:
    """Keep ``data`` on ``client``'s node under ``name`` if its tenant keeps no buffer of that
    name there; else raise ``BufferExistsError`` and change nothing (claiming a name safely
    when several clients share a tenant)."""
    client.call_chain([create(name)], _raw(data))


def get_buffer(client: Client, name: int) -> bytes:
    """The bytes of buffer ``name`` on ``client``'s node (it stays there)."""
    out = client.call_chain([load(name)], b"")
    assert isinstance(out, (bytes, bytearray))
    return bytes(out)


def drop_buffer(client: Client, name: int) -> None:
    """Remove buffer ``name`` from ``client``'s node."""
    client.call_chain([drop(name)], b"")
