"""The function registry, as the node's ``offrac functions --json`` gives it.

``functions.json`` (shipped beside this module) is generated from the Rust registry and kept
identical to it by a test, so ids, names, payload layouts and parameter fields come from one
table. This module turns it into parameter packing and payload encoding/decoding:

- arrays (``int32[]``, ``uint32[]``, ``float32[]``, ``uint16[]``) are numpy arrays;
- the ragged layout (``ragged<uint32>``: id lists) is :class:`Ragged`, also accepted as a list
  of sequences; ``ragged<uint32,float32>`` (CSR) is :class:`CSR`.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "CSR",
    "FUNCTIONS",
    "FUNCTIONS_BY_NAME",
    "FunctionSpec",
    "ParamField",
    "Ragged",
    "decode_output",
    "encode_input",
    "pack_params",
]

_U32_MAX: Final = 0xFFFF_FFFF
_DTYPES: Final[dict[str, str]] = {"int32": "<i4", "uint32": "<u4", "float32": "<f4", "uint16": "<u2"}
_WIRE: Final[dict[str, np.dtype[Any]]] = {k: np.dtype(v) for k, v in _DTYPES.items()}
#: Array layouts: (the wire's dtype, the same in this machine's byte order).
_ARRAYS: Final[dict[str, tuple[np.dtype[Any], np.dtype[Any]]]] = {
    f"{k}[]": (w, w.newbyteorder("=")) for k, w in _WIRE.items()
}


@dataclass(frozen=True)
class ParamField:
    """One named field packed into a hop's 64-bit parameter."""

    name: str
    shift: int
    bits: int
    kind: str  # "unsigned" | "signed" | "float32"
    required: bool
    doc: str

    def pack(self, value: object) -> int:
        """``value`` as this field's bits, shifted into place (ValueError if it does not fit)."""
        if self.kind == "float32":
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"{self.name}= must be a number, not {type(value).__name__}")
            raw = int.from_bytes(struct.pack("<f", float(value)), "little")
        else:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{self.name}= must be an int, not {type(value).__name__}")
            v = int(value)
            if self.kind == "signed":
                lo, hi = -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
            else:
                lo, hi = 0, (1 << self.bits) - 1
            if not lo <= v <= hi:
                raise ValueError(f"{self.name}={v} outside {lo}..={hi} ({self.doc})")
            raw = v & ((1 << self.bits) - 1)
        return raw << self.shift


@dataclass(frozen=True)
class FunctionSpec:
    """One row of the registry."""

    id: int
    name: str
    summary: str
    input: str
    output: str
    params: tuple[ParamField, ...]
    state: str | None
    granularity: str


def _load() -> tuple[FunctionSpec, ...]:
    text = resources.files(__package__).joinpath("functions.json").read_text(encoding="utf-8")
    rows = json.loads(text)["functions"]
    return tuple(
        FunctionSpec(
            id=r["id"],
            name=r["name"],
            summary=r["summary"],
            input=r["input"],
            output=r["output"],
            params=tuple(ParamField(**p) for p in r["params"]),
            state=r["state"],
            granularity=r["granularity"],
        )
        for r in rows
    )


#: Every built-in function, in id order.
FUNCTIONS: Final[tuple[FunctionSpec, ...]] = _load()
#: Name -> spec.
FUNCTIONS_BY_NAME: Final[dict[str, FunctionSpec]] = {f.name: f for f in FUNCTIONS}


def pack_params(spec: FunctionSpec | None, params: Mapping[str, object]) -> int:
    """The u64 parameter from keyword fields (``max_value=100, salt=3``) or a raw ``param=``."""
    params = dict(params)
    fields = spec.params if spec else ()
    if "param" in params:
        raw = params.pop("param")
        if params:
            raise TypeError(f"pass either param= or the named fields, not both ({sorted(params)})")
        if isinstance(raw, bool) or not isinstance(raw, (int, np.integer)):
            raise TypeError(f"param= must be an int, not {type(raw).__name__}")
        if not 0 <= int(raw) < 1 << 64:
            raise ValueError(f"param={raw} outside the u64 range")
        return int(raw)
    param = 0
    for f in fields:
        if f.name in params:
            param |= f.pack(params.pop(f.name))
        elif f.required:
            assert spec is not None
            raise TypeError(f"{spec.name} needs {f.name}= ({f.doc})")
    if params:
        accepted = ", ".join(f"{f.name}=" for f in fields) or "none but param="
        raise TypeError(f"unexpected keyword(s) {sorted(params)} for this function (accepted: {accepted})")
    return param


@dataclass(frozen=True)
class Ragged:
    """Rows of variable length (``ragged<uint32>``): row ``i`` is
    ``values[offsets[i]:offsets[i + 1]]``."""

    offsets: npt.NDArray[np.uint32]
    values: npt.NDArray[Any]

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int] | npt.NDArray[Any]]) -> Ragged:
        lengths = [len(r) for r in rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.uint32)
        np.cumsum(lengths, out=offsets[1:])
        flat = [np.asarray(r) for r in rows if len(r)]
        values = np.concatenate(flat) if flat else np.zeros(0, dtype=np.int64)
        return cls(offsets, _checked_uint32(values, "id list"))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row(self, i: int) -> npt.NDArray[Any]:
        return self.values[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def tolist(self) -> list[list[int]]:
        return [self.row(i).tolist() for i in range(len(self))]

    def encode(self) -> bytes:
        head = np.concatenate([np.array([len(self)], dtype="<u4"), self.offsets.astype("<u4")])
        return head.tobytes() + np.ascontiguousarray(self.values, dtype="<u4").tobytes()


@dataclass(frozen=True)
class CSR:
    """Compressed sparse rows (``ragged<uint32,float32>``): row ``i`` has the values
    ``values[offsets[i]:offsets[i + 1]]`` at columns ``indices[...]``."""

    offsets: npt.NDArray[np.uint32]
    indices: npt.NDArray[np.uint32]
    values: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def to_dense(self, cols: int) -> npt.NDArray[np.float32]:
        out = np.zeros((len(self), cols), dtype=np.float32)
        rows = np.repeat(np.arange(len(self)), np.diff(self.offsets.astype(np.int64)))
        out[rows, self.indices.astype(np.int64)] = self.values
        return out


def _checked_uint32(arr: npt.NDArray[Any], what: str) -> npt.NDArray[np.uint32]:
    if arr.dtype.kind not in "biu":
        raise TypeError(f"{what} must be integers (uint32 on the wire), not dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > _U32_MAX):
        raise ValueError(f"{what} has values outside the uint32 range")
    return arr.astype(np.uint32)


def _array_bytes(data: Any, elem: str, name: str) -> tuple[bytes, tuple[int, ...]]:
    arr = np.asarray(data)
    if arr.dtype == _WIRE[elem]:
        # Already the wire's type: nothing to check or convert (the common, fast case).
        return np.ascontiguousarray(arr).tobytes(), arr.shape
    if elem == "float32":
        if arr.dtype.kind not in "biuf":
            raise TypeError(
                f"{name} input must be a real numeric array (float32 on the wire), not dtype {arr.dtype}"
            )
        return np.ascontiguousarray(arr, dtype="<f4").tobytes(), arr.shape
    if arr.dtype.kind == "f":
        if arr.size and not bool(np.all(np.isfinite(arr))):
            raise ValueError(f"{name} input must be integers; got non-finite floats")
        if arr.size and not bool(np.all(arr == np.trunc(arr))):
            raise ValueError(f"{name} input must be integers; got floats with a fractional part")
    elif arr.dtype.kind not in "biu":
        raise TypeError(f"{name} input must be an integer array ({elem} on the wire), not dtype {arr.dtype}")
    info = np.iinfo(_WIRE[elem])
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise ValueError(f"{name} input has values outside the {elem} range")
    return np.ascontiguousarray(arr, dtype=_DTYPES[elem]).tobytes(), arr.shape


def encode_input(spec: FunctionSpec, data: Any) -> tuple[bytes, tuple[int, ...] | None]:
    """``data`` encoded for ``spec``'s input layout, and its shape (for reshaping results of
    element-wise functions). Raw bytes pass through as they are."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), None
    layout = spec.input
    if layout.endswith("[]"):
        return _array_bytes(data, layout[:-2], spec.name)
    if layout == "ragged<uint32>":
        r = data if isinstance(data, Ragged) else Ragged.from_rows(data)
        return r.encode(), None
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).tobytes(), None
    raise TypeError(f"{type(data).__name__} input: pass bytes, bytearray, memoryview or a numpy array")


def _words(buf: bytes | bytearray, dtype: str, what: str) -> npt.NDArray[Any]:
    if len(buf) % 4:
        raise ValueError(f"{what}: {len(buf)} bytes, not a whole number of 4-byte elements")
    return np.frombuffer(buf, dtype=dtype)


def decode_output(layout: str, buf: bytes | bytearray, shape: tuple[int, ...] | None = None) -> Any:
    """A result in ``layout`` as numpy (arrays), :class:`Ragged`, :class:`CSR` or bytes.
    Raises ValueError when the bytes do not fit the layout."""
    array = _ARRAYS.get(layout)
    if array is not None:
        wire, native = array
        if len(buf) % wire.itemsize:
            raise ValueError(
                f"{layout}: {len(buf)} bytes, not a whole number of {wire.itemsize}-byte elements"
            )
        out = np.frombuffer(buf, dtype=wire)
        if wire != native:  # a big-endian machine
            out = out.astype(native)
        if shape is not None and len(shape) > 1 and math.prod(shape) == out.size:
            out = out.reshape(shape)
        return out
    if layout.startswith("ragged<"):
        arrays = layout[len("ragged<") : -1].split(",")
        w = _words(buf, "<u4", layout)
        if w.size < 2 or w.size < int(w[0]) + 2:
            raise ValueError(f"{layout}: {len(buf)} bytes are too short for the row count they give")
        rows = int(w[0])
        offsets = w[1 : rows + 2].astype(np.uint32)
        n = int(offsets[-1])
        body = np.frombuffer(buf, dtype="<u4", offset=4 * (rows + 2))
        if body.size != n * len(arrays) or bool(np.any(np.diff(offsets.astype(np.int64)) < 0)):
            raise ValueError(f"{layout}: offsets and values do not agree")
        cols = [
            body[i * n : (i + 1) * n].view(_DTYPES[a]).astype(_DTYPES[a][1:]) for i, a in enumerate(arrays)
        ]
        if len(cols) == 2:
            return CSR(offsets, cols[0].astype(np.uint32), cols[1].astype(np.float32))
        return Ragged(offsets, cols[0].astype(np.uint32))
    return bytes(buf)
