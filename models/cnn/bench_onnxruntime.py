"""Per-image latency of the CNN in onnxruntime from Python, on one thread (issue #13's baseline).

    pip install -e 'python[cnn]' scikit-learn
    python3 models/cnn/bench_onnxruntime.py            # both models, every held-out image (360)
    taskset -c 1 python3 models/cnn/bench_onnxruntime.py --repeat 3   # steadier

Each image is one request: its 24,576-byte payload is decoded to a (1, 64, 64, 3) uint16 tensor
and run alone (batch 1). The time of one `InferenceSession.run` is taken per image; the decode is
timed separately. Printed: median and spread per model, beside OffRAC's figures (§5).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

import digits
import reference as ref

PAPER_FPGA_MS = 8.2  # OffRAC §5: one 23.44 KB request (six 4 KB fragments) on the FPGA
PAPER_TF_CPU_MS = 40.0  # the same model, TensorFlow C library with AVX, on their CPU server
WARMUP = 20


def session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def measure(path: Path, payloads: list[bytes], labels: list[int], repeat: int) -> dict[str, float]:
    sess = session(path)
    for p in payloads[:WARMUP]:
        sess.run(None, {"image": ref.image_from_bytes(p)[None]})
    run_ns: list[int] = []
    decode_ns: list[int] = []
    correct = 0
    for _ in range(repeat):
        for p, y in zip(payloads, labels, strict=True):
            t0 = time.perf_counter_ns()
            x = ref.image_from_bytes(p)[None]
            t1 = time.perf_counter_ns()
            scores = sess.run(None, {"image": x})[0]
            t2 = time.perf_counter_ns()
            decode_ns.append(t1 - t0)
            run_ns.append(t2 - t1)
            correct += int(scores[0].argmax() == y)
    ms = np.array(run_ns) / 1e6
    return {
        "images": len(ms),
        "median_ms": float(np.median(ms)),
        "p10_ms": float(np.percentile(ms, 10)),
        "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "decode_median_us": float(np.median(decode_ns) / 1e3),
        "accuracy": correct / len(ms),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model", type=Path, action="append", help="an ONNX file (default: cnn.onnx, cnn_int8.onnx)"
    )
    ap.add_argument("--repeat", type=int, default=1, help="passes over the held-out images (default 1)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    models: list[Path] = args.model or [ref.MODEL_PATH, ref.MODEL_INT8_PATH]

    images, labels, _ = digits.held_out()
    payloads = [ref.image_to_bytes(img) for img in images]
    print(
        f"onnxruntime {ort.__version__}, one thread, batch 1, {len(payloads)} held-out images x {args.repeat}"
    )
    results = {}
    for path in models:
        r = measure(path, payloads, [int(y) for y in labels], args.repeat)
        results[path.name] = r
        print(
            f"{path.name:>14}: median {r['median_ms']:.3f} ms (p10 {r['p10_ms']:.3f}, p90 {r['p90_ms']:.3f},"
            f" p99 {r['p99_ms']:.3f}) over {r['images']} images; decode {r['decode_median_us']:.1f} us;"
            f" accuracy {r['accuracy']:.4f}"
        )
    print(
        f"{'OffRAC FPGA':>14}: {PAPER_FPGA_MS} ms    {'TensorFlow CPU':>14}: {PAPER_TF_CPU_MS} ms (paper, §5)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
