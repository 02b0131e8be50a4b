"""The cluster store (etcd) from Python: named pipelines and the nodes registered there.

Talks to etcd's own JSON gateway (``POST /v3/kv/...``, part of every etcd v3 server), so it
needs no extra package. Keys as the nodes and ``offrac pipeline`` write them:
``<prefix>/pipelines/<name>`` holds a chain in text form (``minmax@0,logit@1``) and
``<prefix>/nodes/<device>`` a node's ``host:port``.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from typing import Any

from .buffers import FN_BUFFER, BufferOp, buffer_param
from .client import Step
from .protocol import DEVICE_SELF, MAX_HOPS, function_id, function_name

__all__ = [
    "DEFAULT_PREFIX",
    "ClusterError",
    "delete_pipeline",
    "format_chain",
    "get_pipeline",
    "list_pipelines",
    "members",
    "parse_chain",
    "put_pipeline",
]

DEFAULT_PREFIX = "/offrac"
DEFAULT_ETCD = "127.0.0.1:2379"
_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


class ClusterError(Exception):
    """The cluster store could not be reached, or holds something unusable."""


def parse_chain(spec: str) -> list[Step]:
    """``FUNCTION[:PARAM][@DEVICE],…`` -> steps (the format of ``offrac call`` and pipelines).

    A named-buffer step is ``buffer.OP:NAME[@DEVICE]`` (OP: put, tee, get, drop, create), e.g.
    ``buffer.get:7@1,gemv@1``."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not 1 <= len(parts) <= MAX_HOPS:
        raise ValueError(f"a chain has 1 to {MAX_HOPS} hops, got {len(parts)}: {spec!r}")
    steps = []
    for part in parts:
        rest, _, device = part.partition("@")
        name, colon, param = rest.partition(":")
        name = name.strip()
        try:
            dev = int(device) if device else DEVICE_SELF
            if name.startswith("buffer."):
                op = name.removeprefix("buffer.")
                if op.upper() not in BufferOp.__members__:
                    raise ValueError(f"buffer operation {op!r} is not put, tee, get, drop or create")
                if not colon:
                    raise ValueError("a buffer step needs its name: buffer.OP:NAME")
                packed = buffer_param(BufferOp[op.upper()], int(param))
                steps.append(Step(FN_BUFFER, device=dev, param=packed))
                continue
            fid = function_id(int(name) if name.isdigit() else name)
            steps.append(Step(fid, device=dev, param=int(param) if param else 0))
        except ValueError as e:
            raise ValueError(f"hop {part!r}: {e}") from None
    return steps


def _step_text(s: Step) -> str:
    op = s.param >> 32
    if s.function == FN_BUFFER and s.param >> 40 == 0 and op in BufferOp._value2member_map_:
        return f"buffer.{BufferOp(op).name.lower()}:{s.param & 0xFFFF_FFFF}"
    text = function_name(s.function) or str(s.function)
    return text + (f":{s.param}" if s.param else "")


def format_chain(steps: list[Step]) -> str:
    """The text form of ``steps``."""
    out = []
    for s in steps:
        text = _step_text(s)
        if s.device != DEVICE_SELF:
            text += f"@{s.device}"
        out.append(text)
    return ",".join(out)


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _unb64(s: str) -> str:
    return base64.b64decode(s).decode()


def _prefix_end(prefix: str) -> str:
    """etcd's range end for "every key starting with prefix"."""
    b = bytearray(prefix.encode())
    b[-1] += 1
    return base64.b64encode(bytes(b)).decode()


def _call(etcd: str, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    url = f"http://{etcd.removeprefix('http://')}/v3/{path}"
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            reply: dict[str, Any] = json.loads(r.read())
            return reply
    except (urllib.error.URLError, OSError) as e:
        raise ClusterError(f"etcd at {etcd}: {e}") from e


def _key(prefix: str, kind: str, name: str = "") -> str:
    return f"{prefix.rstrip('/')}/{kind}/{name}"


def _check(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise ValueError(f"pipeline name {name!r}: use letters, digits, '-', '_' and '.' (1 to 128)")


def put_pipeline(
    name: str,
    chain: str | list[Step],
    *,
    etcd: str = DEFAULT_ETCD,
    prefix: str = DEFAULT_PREFIX,
    timeout: float = 5,
) -> None:
    """Store a pipeline (a chain string or steps), replacing one of the same name."""
    _check(name)
    text = format_chain(parse_chain(chain) if isinstance(chain, str) else chain)
    _call(etcd, "kv/put", {"key": _b64(_key(prefix, "pipelines", name)), "value": _b64(text)}, timeout)


def get_pipeline(
    name: str, *, etcd: str = DEFAULT_ETCD, prefix: str = DEFAULT_PREFIX, timeout: float = 5
) -> list[Step]:
    """The steps of pipeline ``name``; :class:`KeyError` if there is none."""
    _check(name)
    r = _call(etcd, "kv/range", {"key": _b64(_key(prefix, "pipelines", name))}, timeout)
    kvs = r.get("kvs") or []
    if not kvs:
        raise KeyError(f"no pipeline named {name!r}")
    return _parse_stored(name, _unb64(kvs[0].get("value", "")))


def _parse_stored(name: str, text: str) -> list[Step]:
    try:
        return parse_chain(text)
    except ValueError as e:
        raise ClusterError(f"pipeline {name!r} holds a bad chain: {e}") from None


def list_pipelines(
    *, etcd: str = DEFAULT_ETCD, prefix: str = DEFAULT_PREFIX, timeout: float = 5
) -> dict[str, list[Step]]:
    base = _key(prefix, "pipelines")
    r = _call(etcd, "kv/range", {"key": _b64(base), "range_end": _prefix_end(base)}, timeout)
    out = {}
    for kv in r.get("kvs") or []:
        name = _unb64(kv["key"])[len(base) :]
        out[name] = _parse_stored(name, _unb64(kv.get("value", "")))
    return out


def delete_pipeline(
    name: str, *, etcd: str = DEFAULT_ETCD, prefix: str = DEFAULT_PREFIX, timeout: float = 5
) -> bool:
    """Remove pipeline ``name``; False if there was none."""
    _check(name)
    r = _call(etcd, "kv/deleterange", {"key": _b64(_key(prefix, "pipelines", name))}, timeout)
    return int(r.get("deleted", 0)) > 0


def members(*, etcd: str = DEFAULT_ETCD, prefix: str = DEFAULT_PREFIX, timeout: float = 5) -> dict[int, str]:
    """The nodes registered now: device id -> ``host:port``."""
    base = _key(prefix, "nodes")
    r = _call(etcd, "kv/range", {"key": _b64(base), "range_end": _prefix_end(base)}, timeout)
    out = {}
    for kv in r.get("kvs") or []:
        device = _unb64(kv["key"])[len(base) :]
        if device.isdigit():
            out[int(device)] = _unb64(kv.get("value", ""))
    return out
