"""Train the CNN of OffRAC's accelerator A4 on scikit-learn's digits and export it as ONNX.

    pip install -e 'python[cnn-train]'
    python3 models/cnn/train.py

Writes, beside this file: cnn.onnx (float), cnn_int8.onnx (static int8, QDQ), SHA256SUMS and
model.json (split, accuracies, versions, and test vectors for the node). Fixed seeds: the same
library versions on the same CPU give the same files. models/cnn/README.md describes them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# CPU only, and before jax is imported: a machine with a GPU would otherwise give other numbers.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import optax
import sklearn
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

import digits
import reference as ref

SEED = digits.SEED
EPOCHS = 30
BATCH = 32
LEARNING_RATE = 2e-3  # peak, cosine-decayed to 0 over the run
CALIBRATION_IMAGES = 256
OPSET = 17
VECTORS = 20  # held-out samples written to model.json as test vectors

# (out channels, in channels) of the three 3x3 convolutions, each followed by ReLU and a 2x2 max
# pool: 64x64 -> 32 -> 16 -> 8; OffRAC's A4 has "filters from 8 to 32".
CONVS = [(8, 3), (16, 8), (32, 16)]
FLAT = 32 * 8 * 8
HIDDEN = 32

Params = dict[str, jax.Array]
IntArray = npt.NDArray[np.int64]


def dataset() -> tuple[npt.NDArray[np.uint16], IntArray, IntArray, IntArray]:
    """All 1,797 digits as uint16 images, their labels, and the train / held-out indices."""
    grey, labels = digits.load()
    train_idx, test_idx = digits.split(labels)
    return digits.images(grey), labels, train_idx, test_idx


def to_float_nchw(images: npt.NDArray[np.uint16]) -> npt.NDArray[np.float32]:
    # What the ONNX graph does before the first Conv: Cast, Mul by INPUT_SCALE, HWC -> CHW.
    return (images.astype(np.float32) * ref.INPUT_SCALE).transpose(0, 3, 1, 2).copy()


def init_params(key: jax.Array) -> Params:
    params: Params = {}
    keys = jax.random.split(key, len(CONVS) + 2)
    for i, (out_c, in_c) in enumerate(CONVS):
        fan_in = in_c * 9
        params[f"conv{i + 1}.w"] = jax.random.normal(keys[i], (out_c, in_c, 3, 3)) * np.sqrt(2.0 / fan_in)
        params[f"conv{i + 1}.b"] = jnp.zeros((out_c,))
    params["dense1.w"] = jax.random.normal(keys[-2], (FLAT, HIDDEN)) * np.sqrt(2.0 / FLAT)
    params["dense1.b"] = jnp.zeros((HIDDEN,))
    params["dense2.w"] = jax.random.normal(keys[-1], (HIDDEN, ref.CLASSES)) * np.sqrt(1.0 / HIDDEN)
    params["dense2.b"] = jnp.zeros((ref.CLASSES,))
    return params


def forward(params: Params, x: jax.Array) -> jax.Array:
    """x: (N, 3, 64, 64) float32 in [0, 1] -> (N, 10) class scores (logits)."""
    for i in range(len(CONVS)):
        x = jax.lax.conv_general_dilated(
            x, params[f"conv{i + 1}.w"], (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW")
        )
        x = jax.nn.relu(x + params[f"conv{i + 1}.b"][None, :, None, None])
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    x = x.reshape(x.shape[0], -1)  # C-major, as ONNX Flatten of NCHW
    x = jax.nn.relu(x @ params["dense1.w"] + params["dense1.b"])
    return x @ params["dense2.w"] + params["dense2.b"]


def shift(x: npt.NDArray[np.float32], rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """Move each image by -1, 0 or +1 digit pixel (UPSCALE px) per axis, zero-filled.

    1,437 images are few for 72k weights; the digits have blank margins, so a one-pixel move
    is still a plausible digit and the held-out accuracy gains from it.
    """
    out = np.zeros_like(x)
    h, w = x.shape[2:]
    for i, (dy, dx) in enumerate(rng.integers(-1, 2, size=(len(x), 2)) * ref.UPSCALE):
        out[i, :, max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = x[
            i, :, max(-dy, 0) : h + min(-dy, 0), max(-dx, 0) : w + min(-dx, 0)
        ]
    return out


def train(x_train: npt.NDArray[np.float32], y_train: IntArray) -> Params:
    params = init_params(jax.random.PRNGKey(SEED))
    steps_per_epoch = len(y_train) // BATCH
    opt = optax.adam(optax.cosine_decay_schedule(LEARNING_RATE, EPOCHS * steps_per_epoch))
    state = opt.init(params)

    def loss_fn(p: Params, x: jax.Array, y: jax.Array) -> jax.Array:
        loss: jax.Array = optax.softmax_cross_entropy_with_integer_labels(forward(p, x), y).mean()
        return loss

    @jax.jit
    def step(p: Params, s: Any, x: jax.Array, y: jax.Array) -> tuple[Params, Any, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    rng = np.random.default_rng(SEED)
    n = len(y_train)
    for epoch in range(EPOCHS):
        order = rng.permutation(n)
        losses = []
        # The last partial batch is dropped: one compiled shape, and each epoch reshuffles.
        for start in range(0, n - BATCH + 1, BATCH):
            idx = order[start : start + BATCH]
            x = shift(x_train[idx], rng)
            params, state, loss = step(params, state, jnp.asarray(x), jnp.asarray(y_train[idx]))
            losses.append(float(loss))
        print(f"epoch {epoch + 1:2d}/{EPOCHS}: mean loss {np.mean(losses):.4f}", flush=True)
    return params


def jax_scores(params: Params, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    fwd = jax.jit(forward)
    return np.concatenate(
        [np.asarray(fwd(params, jnp.asarray(x[i : i + 120]))) for i in range(0, len(x), 120)]
    )


def export(params: Params, path: Path) -> None:
    """The float network as an ONNX graph whose input is the request payload as a uint16 tensor."""
    w = {k: np.asarray(v, dtype=np.float32) for k, v in params.items()}
    inits = [numpy_helper.from_array(np.array(ref.INPUT_SCALE, dtype=np.float32), "input_scale")]
    inits += [numpy_helper.from_array(v, k) for k, v in w.items()]
    nodes = [
        helper.make_node("Cast", ["image"], ["image_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["image_f", "input_scale"], ["image_scaled"]),
        helper.make_node("Transpose", ["image_scaled"], ["x0"], perm=[0, 3, 1, 2]),
    ]
    for i in range(1, len(CONVS) + 1):
        nodes += [
            helper.make_node(
                "Conv",
                [f"x{i - 1}", f"conv{i}.w", f"conv{i}.b"],
                [f"conv{i}"],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
            ),
            helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"]),
            helper.make_node("MaxPool", [f"relu{i}"], [f"x{i}"], kernel_shape=[2, 2], strides=[2, 2]),
        ]
    last = f"x{len(CONVS)}"
    nodes += [
        helper.make_node("Flatten", [last], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "dense1.w", "dense1.b"], ["dense1"]),
        helper.make_node("Relu", ["dense1"], ["hidden"]),
        helper.make_node("Gemm", ["hidden", "dense2.w", "dense2.b"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "offrac_cnn",
        [
            helper.make_tensor_value_info(
                "image", TensorProto.UINT16, ["N", ref.HEIGHT, ref.WIDTH, ref.CHANNELS]
            )
        ],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", ref.CLASSES])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="offrac models/cnn/train.py"
    )
    model.ir_version = 8  # readable by onnxruntime and tract releases of the last years
    model.doc_string = (
        "OffRAC A4-style CNN on scikit-learn digits. Input: uint16 [N,64,64,3], HWC, the 24,576-byte "
        "request payload per image; scaled by 1/65535. Output: float32 [N,10] class scores (logits)."
    )
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))


def session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def ort_scores(path: Path, images: npt.NDArray[np.uint16]) -> npt.NDArray[np.float32]:
    sess = session(path)
    return np.concatenate(
        [sess.run(None, {"image": images[i : i + 120]})[0] for i in range(0, len(images), 120)]
    )


class Calibration(CalibrationDataReader):  # type: ignore[misc]
    """Training images, one at a time, for the static activation ranges."""

    def __init__(self, images: npt.NDArray[np.uint16]) -> None:
        self.it = iter(images)

    def get_next(self) -> dict[str, npt.NDArray[np.uint16]] | None:
        img = next(self.it, None)
        return None if img is None else {"image": img[None]}


def quantize(src: Path, dst: Path, calib: npt.NDArray[np.uint16]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # onnxruntime's recommended first step: shape inference and graph clean-up before calibration.
        pre = Path(tmp) / "pre.onnx"
        quant_pre_process(str(src), str(pre))
        quantize_static(
            str(pre),
            str(Path(tmp) / dst.name),
            Calibration(calib),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
        )
        model = onnx.load(str(Path(tmp) / dst.name))
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(dst))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ref.HERE, help="output directory (default: beside this file)")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    images, labels, train_idx, test_idx = dataset()
    print(f"digits: {len(labels)} images, {len(train_idx)} train, {len(test_idx)} held out (stratified)")
    x_train = to_float_nchw(images[train_idx])
    t0 = time.process_time()
    params = train(x_train, labels[train_idx])
    print(f"training: {time.process_time() - t0:.1f} s CPU")

    y_test = labels[test_idx]
    s_jax = jax_scores(params, to_float_nchw(images[test_idx]))
    acc_jax = float((s_jax.argmax(1) == y_test).mean())

    float_path, int8_path = out / ref.MODEL_PATH.name, out / ref.MODEL_INT8_PATH.name
    export(params, float_path)
    s_ort = ort_scores(float_path, images[test_idx])
    acc_ort = float((s_ort.argmax(1) == y_test).mean())
    flips = int((s_ort.argmax(1) != s_jax.argmax(1)).sum())
    print(f"held-out accuracy: jax {acc_jax:.4f}, onnxruntime {acc_ort:.4f}")
    print(f"onnxruntime vs jax: max |score diff| {np.abs(s_ort - s_jax).max():.2e}, {flips} argmax differ")

    rng = np.random.default_rng(SEED)
    calib_idx = rng.choice(train_idx, CALIBRATION_IMAGES, replace=False)
    quantize(float_path, int8_path, images[calib_idx])
    s_int8 = ort_scores(int8_path, images[test_idx])
    acc_int8 = float((s_int8.argmax(1) == y_test).mean())
    agree = float((s_int8.argmax(1) == s_ort.argmax(1)).mean())
    print(f"held-out accuracy int8: {acc_int8:.4f} (top-1 agrees with float on {agree:.4f})")

    net = ref.Network.load(float_path)
    sums = {p.name: ref.sha256_file(p) for p in (float_path, int8_path)}
    (out / ref.SUMS_PATH.name).write_text("".join(f"{h}  {n}\n" for n, h in sums.items()))
    for name, digest in sums.items():
        print(f"{name}: {(out / name).stat().st_size} bytes, sha256 {digest}")

    vec_pos = rng.choice(len(test_idx), VECTORS, replace=False)
    grey, _ = digits.load()
    vectors = [
        {
            "digits_index": int(test_idx[p]),
            "label": int(y_test[p]),
            "grey": [int(v) for v in grey[test_idx[p]]],
            "payload_sha256": hashlib.sha256(ref.image_to_bytes(images[test_idx[p]])).hexdigest(),
            "scores": [float(v) for v in s_ort[p]],
            "scores_int8": [float(v) for v in s_int8[p]],
        }
        for p in sorted(vec_pos)
    ]
    meta = {
        "command": "python3 models/cnn/train.py",
        "data": "sklearn.datasets.load_digits (1,797 8x8 images, 10 classes)",
        "split": {"test_size": digits.TEST_FRACTION, "stratify": "label", "random_state": SEED},
        "train_images": len(train_idx),
        "held_out_images": len(test_idx),
        "held_out_indices_sha256": hashlib.sha256(np.sort(test_idx).astype("<i8").tobytes()).hexdigest(),
        "parameters": net.parameter_count(),
        "epochs": EPOCHS,
        "batch": BATCH,
        "learning_rate": LEARNING_RATE,
        "seed": SEED,
        "calibration_images": CALIBRATION_IMAGES,
        "accuracy": {"jax": acc_jax, "onnxruntime_float": acc_ort, "onnxruntime_int8": acc_int8},
        "held_out_correct": {
            "onnxruntime_float": int((s_ort.argmax(1) == y_test).sum()),
            "onnxruntime_int8": int((s_int8.argmax(1) == y_test).sum()),
        },
        "versions": {
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "jax": jax.__version__,
            "optax": optax.__version__,
            "scikit-learn": sklearn.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
        },
        "sha256": sums,
        "vectors": vectors,
    }
    (out / "model.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
