"""Build each RTL module with Icarus Verilog and run its cocotb testbench (tb_*.py) under pytest.

Also checks the Python header model against the vector file, since the
testbenches trust it for the random cases.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cocotb_tools.check_results import get_results
from cocotb_tools.runner import get_runner
from header_model import ERRORS, VECTORS, decode_request, encode_response, padded_hops, wire_beats

TESTS = Path(__file__).resolve().parent
RTL = TESTS.parent
# Out of the source tree's way; override with OFFRAC_RTL_BUILD.
BUILD = Path(os.environ.get("OFFRAC_RTL_BUILD", RTL / "build"))


# Modules a top instantiates, and the parameters a testbench needs (small limits are cheap to reach).
SUBMODULES = {"offrac_accel_minmax": ("offrac_minmax_elem",)}
PARAMETERS: dict[str, dict[str, object]] = {
    "offrac_accel_minmax": {"MAX_BEATS": 8},
    "offrac_accel_topk": {"K_MAX": 16},
}


def test_model_matches_request_vectors() -> None:
    for v in VECTORS["requests"]:
        b = bytes.fromhex(v["hex"])
        assert len(b) == 64 * wire_beats(b), v[
            "note"
        ]  # the extension is there exactly when the model takes it
        d = decode_request(b)
        assert d.error == ERRORS[v["error"]], v["note"]
        if v["valid"]:
            want = v["fields"]
            assert d.fields == {k: want[k] for k in d.fields}, v["note"]
            assert d.hops == padded_hops(want["hops"]), v["note"]


def test_model_matches_response_vectors() -> None:
    for v in VECTORS["responses"]:
        assert encode_response(v["fields"]).hex() == v["hex"], v["note"]


@pytest.mark.parametrize(
    ("toplevel", "bench"),
    [
        ("offrac_req_header_parse", "tb_req_header_parse"),
        ("offrac_resp_header_build", "tb_resp_header_build"),
        ("offrac_accel_echo", "tb_accel_echo"),
        ("offrac_minmax_elem", "tb_minmax_elem"),
        ("offrac_accel_minmax", "tb_accel_minmax"),
        ("offrac_accel_topk", "tb_accel_topk"),
    ],
)
def test_rtl(toplevel: str, bench: str) -> None:
    runner = get_runner("icarus")
    build_dir = BUILD / toplevel
    runner.build(
        sources=[RTL / f"{m}.v" for m in (toplevel, *SUBMODULES.get(toplevel, ()))],
        parameters=PARAMETERS.get(toplevel, {}),
        hdl_toplevel=toplevel,
        build_dir=build_dir,
        build_args=["-Wall"],
        always=True,
    )
    results = runner.test(
        hdl_toplevel=toplevel,
        test_module=bench,
        build_dir=build_dir,
        test_dir=TESTS,
        results_xml=str(build_dir / "results.xml"),
    )
    tests, failed = get_results(Path(results))
    assert tests > 0 and failed == 0, f"{failed} of {tests} cocotb tests failed"
