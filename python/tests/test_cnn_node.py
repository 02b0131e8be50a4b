"""The CNN (function 17) through a real node: scores against onnxruntime's recorded ones,
the held-out accuracy measured through the node, bad shapes, and a burst past its slot's
queue depth answered exactly once.

The held-out check needs scikit-learn (the digits); the ``cnn`` extra installs it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from offrac import BadInputError, Client, FunctionId, Pool

from conftest import REPO, Node

MODELS = REPO / "models" / "cnn"
sys.path.insert(0, str(MODELS))
import reference as ref  # noqa: E402  (models/cnn is not a package)

MODEL = json.loads((MODELS / "model.json").read_text())


@pytest.fixture(scope="module")
def mc(node: Node) -> Iterator[Client]:
    with node.client(busy_retries=50) as c:
        yield c


def _vector_image(v: dict[str, Any]) -> npt.NDArray[np.uint16]:
    return ref.grey_to_image(np.asarray(v["grey"]))


def test_function_is_in_the_registry() -> None:
    assert FunctionId.CNN == 17


def test_recorded_vectors_match_onnxruntime(mc: Client) -> None:
    worst = 0.0
    for v in MODEL["vectors"]:
        scores = mc.call("cnn", _vector_image(v))
        assert scores.dtype == np.float32 and scores.shape == (10,)
        expected = np.asarray(v["scores"], dtype=np.float32)
        worst = max(worst, float(np.max(np.abs(scores - expected))))
        assert int(np.argmax(scores)) == int(np.argmax(expected))
    assert worst < 1e-4, worst


def test_raw_bytes_and_the_array_give_the_same_scores(mc: Client) -> None:
    image = _vector_image(MODEL["vectors"][3])
    a = mc.call("cnn", image)
    b = mc.call("cnn", ref.image_to_bytes(image))
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("size", [0, 2, 24_574, 24_578, 49_152])
def test_wrong_sizes_are_bad_input(mc: Client, size: int) -> None:
    with pytest.raises(BadInputError, match="24576 bytes"):
        mc.call("cnn", bytes(size))


def test_values_out_of_uint16_range_are_refused_by_the_client(mc: Client) -> None:
    image = np.zeros((64, 64, 3), dtype=np.int64)
    image[0, 0, 0] = 70_000
    with pytest.raises(ValueError, match="uint16"):
        mc.call("cnn", image)


def test_a_burst_beyond_the_queue_depth_is_answered_once_each(node: Node) -> None:
    """The default slot holds 4 waiting images; 48 at once from 4 connections all come back,
    each with its own image's scores."""
    images = [_vector_image(v) for v in MODEL["vectors"][:12]]
    expected = [np.asarray(v["scores"], dtype=np.float32) for v in MODEL["vectors"][:12]]
    with Pool(node.address, per_node=4, busy_retries=200) as pool:
        futures = [pool.submit("cnn", images[i % 12]) for i in range(48)]
        results = [f.result(timeout=30) for f in futures]
    for i, r in enumerate(results):
        assert np.max(np.abs(r - expected[i % 12])) < 1e-4, i


def test_held_out_accuracy_through_the_node(mc: Client) -> None:
    """All 360 held-out digits through the node: the same predictions as onnxruntime's,
    so the same 352 correct (97.78 %) that model.json records."""
    pytest.importorskip("sklearn", reason="the held-out images come from scikit-learn's digits")
    import digits

    images, labels, _ = digits.held_out()
    futures = [mc.submit("cnn", img) for img in images]
    predicted = np.array([int(np.argmax(f.result(timeout=30))) for f in futures])
    correct = int(np.sum(predicted == labels))
    assert correct == MODEL["held_out_correct"]["onnxruntime_float"], correct
