"""The committed CNN model of issue #13 (models/cnn): its checksums, its input format, and the
numpy reference of the float network (models/cnn/reference.py) against onnxruntime.

Needs the `cnn` extra (onnx, onnxruntime); never the training framework. The held-out accuracy
check also needs scikit-learn (the data) and is skipped without it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

MODELS = Path(__file__).resolve().parents[2] / "models" / "cnn"
pytest.importorskip("onnx", reason="the CNN model tests need the cnn extra: pip install -e 'python[cnn]'")
ort = pytest.importorskip(
    "onnxruntime", reason="the CNN model tests need the cnn extra: pip install -e 'python[cnn]'"
)
sys.path.insert(0, str(MODELS))
import reference as ref  # noqa: E402

META: dict[str, Any] = json.loads((MODELS / "model.json").read_text())
# float64 reference against onnxruntime's float32: scores are O(10), float32 rounding through
# ~1,000-term sums stays below 1e-4 (measured ~1e-5); a wrong op or weight is off by far more.
ATOL = 1e-4


def session(path: Path) -> Any:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def vector_images() -> np.ndarray:
    return np.stack([ref.grey_to_image(v["grey"]) for v in META["vectors"]])


def random_images(n: int, seed: int = 0) -> np.ndarray:
    # Full-range noise and its extremes, unlike anything the model was trained on.
    rng = np.random.default_rng(seed)
    imgs = rng.integers(0, 65536, size=(n, *ref.IMAGE_SHAPE), dtype=np.uint16)
    imgs[0] = 0
    imgs[1] = 65535
    return imgs


@pytest.fixture(scope="module")
def net() -> ref.Network:
    return ref.Network.load(ref.MODEL_PATH)


def test_checksums_match_the_committed_files() -> None:
    sums = ref.read_sums()
    assert set(sums) == {"cnn.onnx", "cnn_int8.onnx"}
    for name, digest in sums.items():
        assert ref.sha256_file(MODELS / name) == digest, f"{name} differs from SHA256SUMS"
        assert META["sha256"][name] == digest
    assert (MODELS / "cnn.onnx").stat().st_size < 1 << 20


def test_graph_interface(net: ref.Network) -> None:
    import onnx

    model = onnx.load(str(ref.MODEL_PATH))
    onnx.checker.check_model(model, full_check=True)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 13
    (inp,) = model.graph.input
    (out,) = model.graph.output
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.UINT16
    assert [d.dim_value or d.dim_param for d in inp.type.tensor_type.shape.dim] == ["N", 64, 64, 3]
    assert out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_value or d.dim_param for d in out.type.tensor_type.shape.dim] == ["N", 10]
    assert [op for op, *_ in net.nodes] == ["Cast", "Mul", "Transpose"] + ["Conv", "Relu", "MaxPool"] * 3 + [
        "Flatten",
        "Gemm",
        "Relu",
        "Gemm",
    ]
    assert [net.weights[f"conv{i}.w"].shape[0] for i in (1, 2, 3)] == [8, 16, 32]
    assert net.parameter_count() == META["parameters"]


def test_input_format_byte_for_byte() -> None:
    grey = np.zeros(64, dtype=np.int64)
    grey[0] = 16  # top-left 8x8 block full scale
    grey[9] = 1  # row 1, column 1 -> pixels 8..15 x 8..15
    img = ref.grey_to_image(grey)
    assert img.shape == (64, 64, 3) and img.dtype == np.uint16
    payload = ref.image_to_bytes(img)
    assert len(payload) == ref.IMAGE_BYTES == 24576

    def at(y: int, x: int, c: int) -> int:
        off = 2 * ((y * 64 + x) * 3 + c)
        return payload[off] | payload[off + 1] << 8  # little-endian

    assert all(at(y, x, c) == 65535 for y in (0, 7) for x in (0, 7) for c in range(3))
    assert at(8, 0, 0) == 0 and at(0, 8, 2) == 0
    assert all(at(y, x, c) == 4096 for y in (8, 15) for x in (8, 15) for c in range(3))  # (1*65535+8)//16
    assert at(16, 16, 1) == 0
    assert [int(ref.grey_to_image(np.full(64, v))[0, 0, 0]) for v in (0, 8, 16)] == [0, 32768, 65535]
    np.testing.assert_array_equal(ref.image_from_bytes(payload), img)
    for v in META["vectors"]:
        assert (
            hashlib.sha256(ref.image_to_bytes(ref.grey_to_image(v["grey"]))).hexdigest()
            == v["payload_sha256"]
        )


def test_input_format_refuses_bad_shapes() -> None:
    with pytest.raises(ValueError):
        ref.image_from_bytes(bytes(ref.IMAGE_BYTES - 2))
    with pytest.raises(ValueError):
        ref.grey_to_image(np.full(64, 17))
    with pytest.raises(ValueError):
        ref.image_to_bytes(np.zeros((64, 64, 4), dtype=np.uint16))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_reference_matches_onnxruntime(net: ref.Network, dtype: type) -> None:
    images = np.concatenate([vector_images(), random_images(6)])
    want = session(ref.MODEL_PATH).run(None, {"image": images})[0]
    got = net.forward(images, dtype=dtype)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    np.testing.assert_array_equal(
        got[: len(META["vectors"])].argmax(1), want[: len(META["vectors"])].argmax(1)
    )


@pytest.mark.parametrize("name", ["conv1.w", "conv2.w", "conv3.w"])
def test_reference_notices_a_changed_weight(net: ref.Network, name: str) -> None:
    # The tolerance is tight enough to catch the largest weight of one layer off by 1 %.
    images = vector_images()
    base = net.forward(images)
    w = net.weights[name]
    changed = w.copy()
    changed[np.unravel_index(np.abs(w).argmax(), w.shape)] *= 1.01
    net.weights[name] = changed
    try:
        assert np.abs(net.forward(images) - base).max() > 5 * ATOL
    finally:
        net.weights[name] = w


def test_recorded_scores_and_labels() -> None:
    images = vector_images()
    labels = np.array([v["label"] for v in META["vectors"]])
    scores = session(ref.MODEL_PATH).run(None, {"image": images})[0]
    np.testing.assert_allclose(scores, [v["scores"] for v in META["vectors"]], rtol=0, atol=ATOL)
    assert (scores.argmax(1) == labels).mean() >= 0.9
    int8 = session(ref.MODEL_INT8_PATH).run(None, {"image": images})[0]
    # Integer kernels may round a step differently on another CPU: a loose bound, same top-1.
    np.testing.assert_allclose(int8, [v["scores_int8"] for v in META["vectors"]], rtol=0, atol=0.5)
    assert (int8.argmax(1) == np.array([v["scores_int8"] for v in META["vectors"]]).argmax(1)).all()


def test_held_out_accuracy_as_recorded() -> None:
    pytest.importorskip("sklearn", reason="the held-out images come from scikit-learn's digits")
    import digits

    images, labels, idx = digits.held_out()
    assert hashlib.sha256(np.sort(idx).astype("<i8").tobytes()).hexdigest() == META["held_out_indices_sha256"]
    for name, key in ((ref.MODEL_PATH, "onnxruntime_float"), (ref.MODEL_INT8_PATH, "onnxruntime_int8")):
        scores = session(name).run(None, {"image": images})[0]
        assert int((scores.argmax(1) == labels).sum()) == META["held_out_correct"][key], name.name
