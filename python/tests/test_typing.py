"""The typed overloads of ``call``/``submit``: generated from the registry, and what mypy makes
of them — a misspelt parameter, an array of the wrong dtype, a wrong parameter type, or the
wrong result type is reported, while valid calls type-check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]

SAMPLE = """\
import numpy as np
import numpy.typing as npt

import offrac
from offrac.registry import CSR, Ragged

c = offrac.Client("127.0.0.1:1")
ints = np.arange(10, dtype=np.int32)
floats = np.ones(10, dtype=np.float32)
a: npt.NDArray[np.int32] = c.call("topk", ints, k=3)
b: npt.NDArray[np.float32] = c.call("logit", floats)
d: npt.NDArray[np.float32] = c.call("minmax", [1.0, 2.0])
e: bytes = c.call("echo", b"x")
f: CSR = c.call("sparsetransform", floats, cols=5)
g: Ragged = c.call("firstx", [[1, 2], [3]], x=1)
h, info = c.call("topk", ints, k=3, return_info=True)
fut = c.submit("logit", floats)
i: npt.NDArray[np.float32] = fut.result()
j = c.call(1, ints, k=3)
name: str = "topk"
k = c.call(name, ints, param=3)
c.call("topk", ints, kk=3)  # E: a misspelt parameter
c.call("topk", floats, k=3)  # E: a float array for an int32 function
l: bytes = c.call("topk", ints, k=3)  # E: the result is an int32 array
c.call(name, ints, k=3)  # E: a name held in a str takes only param=
c.call("boxcox", floats, lmbda="0.5")  # E: lmbda is a float


async def use_aio(ac: offrac.aio.Client) -> None:
    m: npt.NDArray[np.int32] = await ac.call("topk", ints, k=3)
    await ac.call("topk", ints, kk=3)  # E: a misspelt parameter
"""


def test_the_generated_overloads_match_the_registry() -> None:
    gen = PYTHON_DIR / "tools" / "gen_overloads.py"
    r = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_reports_exactly_the_wrong_calls(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extras")
    sample = tmp_path / "sample.py"
    sample.write_text(SAMPLE)
    env = {**os.environ, "MYPYPATH": str(PYTHON_DIR)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--no-incremental",
            "--no-error-summary",
            str(sample),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    flagged = {int(m.group(1)) for m in re.finditer(r"sample\.py:(\d+): error:", r.stdout)}
    wanted = {n for n, line in enumerate(SAMPLE.splitlines(), 1) if "# E:" in line}
    assert len(wanted) == 6
    assert flagged == wanted, r.stdout
