"""The CNN's input format and a numpy reference of the exported float network.

Everything here needs numpy only, plus the `onnx` package to read the weights out of `cnn.onnx`.
The training script, the benchmark and the tests share the input format defined here; the node
runs the ONNX file itself (tract) and is checked against onnxruntime's recorded scores.

Input format (one image, 24,576 bytes): 64 x 64 pixels, row-major, channel-last (HWC), three
uint16 channels per pixel, little-endian. The byte offset of row y, column x, channel c is
``2 * ((y * 64 + x) * 3 + c)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

HEIGHT = 64
WIDTH = 64
CHANNELS = 3
IMAGE_SHAPE = (HEIGHT, WIDTH, CHANNELS)
IMAGE_BYTES = HEIGHT * WIDTH * CHANNELS * 2  # 24,576: OffRAC's A4 request size
CLASSES = 10
# uint16 -> float32 in [0, 1]: one multiply, the same constant in training, ONNX and here.
INPUT_SCALE = np.float32(1.0 / 65535.0)

# scikit-learn's digits: 8x8 grey levels 0..16, each blown up to an 8x8 block (64 / 8).
DIGITS_SIDE = 8
DIGITS_MAX = 16
UPSCALE = HEIGHT // DIGITS_SIDE

HERE = Path(__file__).resolve().parent
MODEL_PATH = HERE / "cnn.onnx"
MODEL_INT8_PATH = HERE / "cnn_int8.onnx"
SUMS_PATH = HERE / "SHA256SUMS"

U16Array = npt.NDArray[np.uint16]
F32Array = npt.NDArray[np.float32]
FArray = npt.NDArray[np.floating[Any]]


def grey_to_image(grey: npt.ArrayLike) -> U16Array:
    """One digits sample (64 grey levels 0..16, row-major 8x8) -> a uint16 image of IMAGE_SHAPE.

    Level v becomes round(v * 65535 / 16) = (v * 65535 + 8) // 16 (0 -> 0, 16 -> 65535),
    replicated into an 8x8 block of pixels (nearest-neighbour upscaling) and into all three
    channels (the digits are grey).
    """
    levels = np.asarray(grey, dtype=np.int64).reshape(DIGITS_SIDE, DIGITS_SIDE)
    if levels.min() < 0 or levels.max() > DIGITS_MAX:
        raise ValueError(f"grey levels must be in 0..{DIGITS_MAX}")
    value = (levels * 65535 + DIGITS_MAX // 2) // DIGITS_MAX
    big = np.repeat(np.repeat(value, UPSCALE, axis=0), UPSCALE, axis=1)
    return np.repeat(big[:, :, None], CHANNELS, axis=2).astype(np.uint16)


def image_to_bytes(image: U16Array) -> bytes:
    """The request payload of one image: IMAGE_BYTES bytes, HWC, uint16 little-endian."""
    if image.shape != IMAGE_SHAPE:
        raise ValueError(f"image shape {image.shape}, expected {IMAGE_SHAPE}")
    return np.ascontiguousarray(image, dtype="<u2").tobytes()


def image_from_bytes(payload: bytes) -> U16Array:
    """The inverse of image_to_bytes."""
    if len(payload) != IMAGE_BYTES:
        raise ValueError(f"{len(payload)} bytes, expected {IMAGE_BYTES}")
    return np.frombuffer(payload, dtype="<u2").reshape(IMAGE_SHAPE).astype(np.uint16)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_sums(path: Path = SUMS_PATH) -> dict[str, str]:
    """SHA256SUMS (sha256sum's format: "<hex>  <name>") as {name: hex}."""
    sums: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums[name.lstrip("*")] = digest
    return sums


# --- the float network, op by op --------------------------------------------------------------

Node = tuple[str, list[str], list[str], dict[str, Any]]


class Network:
    """The exported graph as a list of (op, inputs, outputs, attributes) plus its initializers.

    Only the ops the export uses are known; anything else is refused, so a changed export
    cannot pass unnoticed through a reference that ignores it.
    """

    OPS = frozenset({"Cast", "Mul", "Transpose", "Conv", "Relu", "MaxPool", "Flatten", "Gemm"})

    def __init__(self, nodes: Sequence[Node], weights: dict[str, F32Array], inp: str, out: str) -> None:
        for op, _, _, _ in nodes:
            if op not in self.OPS:
                raise ValueError(f"op {op} is not in the reference")
        self.nodes = list(nodes)
        self.weights = weights
        self.input = inp
        self.output = out

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> Network:
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(path))
        g = model.graph
        weights = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        nodes: list[Node] = [
            (
                n.op_type,
                list(n.input),
                list(n.output),
                {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute},
            )
            for n in g.node
        ]
        return cls(nodes, weights, g.input[0].name, g.output[0].name)

    def parameter_count(self) -> int:
        # The scalar input scale is a constant, not a trained parameter.
        return sum(int(w.size) for w in self.weights.values() if w.ndim > 0)

    def forward(self, images: U16Array, dtype: type[np.floating[Any]] = np.float64) -> FArray:
        """Class scores (N, 10) for uint16 images (N, 64, 64, 3), computed in `dtype`.

        float64 is the precise reference; float32 is what a float32 kernel should get within
        rounding.
        """
        if images.ndim != 4 or images.shape[1:] != IMAGE_SHAPE:
            raise ValueError(f"images shape {images.shape}, expected (N, {HEIGHT}, {WIDTH}, {CHANNELS})")
        env: dict[str, FArray | U16Array] = {self.input: images}
        for name, w in self.weights.items():
            env[name] = w.astype(dtype)
        for op, ins, outs, attrs in self.nodes:
            args = [env[i] for i in ins if i]
            env[outs[0]] = _run(op, args, attrs, dtype)
        return np.asarray(env[self.output])


def _run(op: str, args: list[Any], attrs: dict[str, Any], dtype: type[np.floating[Any]]) -> FArray:
    if op == "Cast":
        if attrs.get("to") != 1:  # onnx.TensorProto.FLOAT
            raise ValueError("only Cast to float is in the reference")
        return np.asarray(args[0]).astype(dtype)
    if op == "Mul":
        return np.asarray(args[0] * args[1], dtype=dtype)
    if op == "Transpose":
        return np.ascontiguousarray(np.transpose(args[0], attrs["perm"]))
    if op == "Conv":
        return conv2d(args[0], args[1], args[2] if len(args) > 2 else None, attrs)
    if op == "Relu":
        return np.maximum(np.asarray(args[0], dtype=dtype), dtype(0))
    if op == "MaxPool":
        return maxpool2d(args[0], attrs)
    if op == "Flatten":
        axis = int(attrs.get("axis", 1))
        x: FArray = np.asarray(args[0])
        return x.reshape(int(np.prod(x.shape[:axis])), -1)
    if op == "Gemm":
        return gemm(args[0], args[1], args[2] if len(args) > 2 else None, attrs)
    raise ValueError(f"op {op} is not in the reference")


def conv2d(x: FArray, w: FArray, b: FArray | None, attrs: dict[str, Any]) -> FArray:
    """ONNX Conv (a cross-correlation), NCHW input, OIHW weights, stride 1, no dilation, one group."""
    if attrs.get("group", 1) != 1 or any(s != 1 for s in attrs.get("strides", [1, 1])):
        raise ValueError("only stride 1, group 1 convolutions are in the reference")
    if any(d != 1 for d in attrs.get("dilations", [1, 1])) or attrs.get("auto_pad", b"NOTSET") not in (
        b"NOTSET",
        "NOTSET",
    ):
        raise ValueError("only explicit pads, no dilation, are in the reference")
    top, left, bottom, right = attrs.get("pads", [0, 0, 0, 0])
    kh, kw = w.shape[2], w.shape[3]
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    # windows: (N, C, H_out, W_out, kh, kw); contract C, kh, kw against the weights' I, H, W.
    windows = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    out: FArray = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3]))  # (N, H_out, W_out, O)
    if b is not None:
        out = out + b
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def maxpool2d(x: FArray, attrs: dict[str, Any]) -> FArray:
    """ONNX MaxPool with kernel == strides, no padding, dimensions divisible by the kernel."""
    kh, kw = attrs["kernel_shape"]
    if list(attrs.get("strides", [1, 1])) != [kh, kw] or any(attrs.get("pads", [0, 0, 0, 0])):
        raise ValueError("only non-overlapping, unpadded pooling is in the reference")
    n, c, h, w = x.shape
    if h % kh or w % kw:
        raise ValueError(f"{h}x{w} is not divisible by the pool {kh}x{kw}")
    return np.asarray(x.reshape(n, c, h // kh, kh, w // kw, kw).max(axis=(3, 5)), dtype=x.dtype)


def gemm(a: FArray, b: FArray, c: FArray | None, attrs: dict[str, Any]) -> FArray:
    """ONNX Gemm: alpha * A' @ B' + beta * C."""
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    out = float(attrs.get("alpha", 1.0)) * (a @ b)
    if c is not None:
        out = out + float(attrs.get("beta", 1.0)) * c
    return np.asarray(out, dtype=a.dtype)
