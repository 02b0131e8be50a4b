"""Build each RTL module with Icarus Verilog and run its cocotb testbench (tb_*.py) under pytest.

Also checks the Python header model against the vector file, since the
testbenches trust it for the random cases.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cocotb_tools.check_results import get_results
from cocotb_tools.runner import get_runner
from header_model import ERRORS, VECTORS, decode_request, encode_response, padded_hops, wire_beats

TESTS = Path(__file__).resolve().parent
RTL = TESTS.parent
# Out of the source tree's way; override with OFFRAC_RTL_BUILD.
BUILD = Path(os.environ.get("OFFRAC_RTL_BUILD", RTL / "build"))
# Core traces replayed per configuration (make rtl-traces raises it); CI keeps it small.
TRACES = int(os.environ.get("OFFRAC_RTL_TRACES", "25"))
# The replays against the engine, a trace costing more (the dispatcher's) or about as much (the
# router's, ten hops) as a pool or slot trace: their own counts, TRACES unless set. (The benches
# read these names: cocotb's runner lets the process's environment override extra_env, so an
# OFFRAC_RTL_TRACES set by make would win over a count passed under that name.)
DISPATCHER_TRACES = int(os.environ.get("OFFRAC_RTL_DISPATCHER_TRACES", str(TRACES)))
ROUTER_TRACES = int(os.environ.get("OFFRAC_RTL_ROUTER_TRACES", str(TRACES)))
# chains through the whole request path against Engine (tb_request_path.engine_replay)
PATH_TRACES = int(os.environ.get("OFFRAC_RTL_PATH_TRACES", str(TRACES)))
TRACE_SEED = int(os.environ.get("OFFRAC_RTL_TRACE_SEED", "1"))
EXAMPLES = RTL.parent / "target" / "release" / "examples"


@functools.cache
def workspace_build() -> None:
    """The examples the benches run (engine_replay, accel_oracle, rtl_trace), built as `make build`
    builds everything: the whole workspace with the same features, so that a build here does not
    change feature unification and recompile the dependencies `make build` compiled."""
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "build", "--release", "-q", "--workspace", "--bins", "--examples"]
    if shutil.which("verilator"):  # the Makefile's RTL_FEATURES
        cmd += ["--features", "offrac-cli/rtl"]
    subprocess.run(cmd, check=True, cwd=RTL.parent)


# Modules a top instantiates, and the parameters a testbench needs (small limits are cheap to reach).
SUBMODULES = {
    "offrac_accel_echo": ("offrac_axis_reg",),
    "offrac_accel_minmax": ("offrac_minmax_elem", "offrac_axis_reg"),
    "offrac_accel_topk": ("offrac_axis_reg",),
    "offrac_accel_mapid": ("offrac_mapid_probe", "offrac_result_buffer", "offrac_axis_reg"),
    "offrac_accel_bucketize": ("offrac_result_buffer", "offrac_axis_reg"),
    "offrac_accel_sparse": ("offrac_sparse_packer", "offrac_axis_reg"),
    "offrac_result_buffer": ("offrac_axis_reg",),
    "offrac_slot_stage": ("offrac_selector", "offrac_slot_queue"),
    "offrac_chain_router": ("offrac_axis_reg",),
    "offrac_dispatcher": ("offrac_req_header_parse", "offrac_pool_admit", "offrac_resp_header_build"),
    "offrac_request_path": (
        "offrac_dispatcher",
        "offrac_req_header_parse",
        "offrac_pool_admit",
        "offrac_resp_header_build",
        "offrac_chain_router",
        "offrac_accel_echo",
        "offrac_accel_topk",
        "offrac_accel_mapid",
        "offrac_mapid_probe",
        "offrac_accel_minmax",
        "offrac_minmax_elem",
        "offrac_accel_sparse",
        "offrac_sparse_packer",
        "offrac_accel_bucketize",
        "offrac_result_buffer",
        "offrac_slot_stage",
        "offrac_selector",
        "offrac_slot_queue",
        "offrac_axis_reg",
    ),
}
PARAMETERS: dict[str, dict[str, object]] = {
    "offrac_accel_minmax": {"MAX_BEATS": 8},
    "offrac_accel_topk": {"K_MAX": 16},
    "offrac_accel_mapid": {"TABLE_BITS": 6, "MAX_BEATS": 8},
    "offrac_accel_bucketize": {"SETS_MAX": 3, "BORDERS_MAX": 24, "MAX_BEATS": 8},
    "offrac_accel_sparse": {"MAX_BEATS": 8},
    "offrac_axis_reg": {"WIDTH": 37},
    "offrac_result_buffer": {"MAX_BEATS": 4},
    "offrac_mapid_probe": {"KEYS": 4, "TABLE_BITS": 5},
    "offrac_slot_queue": {"DEPTH": 5},
    # as tb_dispatcher.py expects: functions 0, 1 and 3 hosted, device 3
    "offrac_dispatcher": {
        "CONN_COUNT": 4,
        "BUF_COUNT": 2,
        "BUF_BYTES": 512,
        "MAX_PAYLOAD": 400,
        "HOSTED": "256'hb",
        "DEVICE_ID": 3,
        # the single-fragment FIFO: payloads up to 200 bytes, 300 bytes queued (two of 200 fill it)
        "SMALL_MAX": 264,
        "SMALL_BYTES": 300,
    },
    # as tb_chain_router.py expects: device 3, functions 0, 1 and 6 hosted, peers 1, 7 and 200
    "offrac_chain_router": {
        "CONN_WIDTH": 2,
        "DEVICE_ID": 3,
        "HOSTED": "256'h43",
        "PEERS": "256'h100000000000000000000000000000000000000000000000082",
        "MAX_PAYLOAD": 256,
    },
    # as tb_request_path.py expects
    "offrac_request_path": {
        "CONN_COUNT": 8,
        "BUF_COUNT": 4,
        "BUF_BYTES": 1024,
        "MAX_PAYLOAD": 512,
        "DESC_DEPTH": 4,
        "TOPK_K_MAX": 16,
        "MAPID_TABLE_BITS": 6,
        # MAPID_MAX_BEATS left to its default, MAX_PAYLOAD / 64 = 8: MapId takes what the dispatcher admits
        "PEERS": "256'h200",  # device 9
        # the single-fragment FIFO: payloads up to 256 bytes, 512 bytes queued
        "SMALL_MAX": 320,
        "SMALL_BYTES": 512,
    },
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
        ("offrac_slot_queue", "tb_slot_queue"),
        ("offrac_axis_reg", "tb_axis_reg"),
        ("offrac_result_buffer", "tb_result_buffer"),
        ("offrac_mapid_probe", "tb_mapid_probe"),
        ("offrac_sparse_packer", "tb_sparse_packer"),
    ],
)
def test_rtl(toplevel: str, bench: str) -> None:
    run(toplevel, bench, BUILD / toplevel, PARAMETERS.get(toplevel, {}), {})


def accel_oracle() -> Path:
    """The software built-ins behind a JSON interface (crates/accel/examples/accel_oracle.rs): the
    expected outputs of the accelerators that must be bit-exact with them come from the shipping code."""
    workspace_build()
    return EXAMPLES / "accel_oracle"


@pytest.mark.parametrize(
    ("toplevel", "bench"),
    [
        ("offrac_accel_minmax", "tb_accel_minmax"),
        ("offrac_accel_topk", "tb_accel_topk"),
        ("offrac_accel_mapid", "tb_accel_mapid"),
        ("offrac_accel_bucketize", "tb_accel_bucketize"),
        ("offrac_accel_sparse", "tb_accel_sparse"),
        ("offrac_request_path", "tb_request_path"),
    ],
)
def test_accel_against_software(toplevel: str, bench: str) -> None:
    env = {"OFFRAC_ACCEL_ORACLE": str(accel_oracle())}
    run(toplevel, bench, BUILD / toplevel, PARAMETERS.get(toplevel, {}), env)


@pytest.mark.parametrize("policy", ["rr", "jsq", "runtime"])
def test_request_path_slots(policy: str) -> None:
    """The top with two top-k and two echo slots (and one of each other function), the selector's RR
    or JSQ: tb_request_path's slot tests (and, under RR, its random and chain rounds); or the policy
    at run time (SLOT_POLICY 2, cfg_slot_policy at reset, as the Verilated datapath is built): its
    slot tests, the policy test under both values in one build."""
    env = {"OFFRAC_ACCEL_ORACLE": str(accel_oracle()), "OFFRAC_RP_SLOTS": policy}
    params = PARAMETERS["offrac_request_path"] | {
        # slots 0 and 1 top-k, 2 and 3 echo, then min-max, MapId, SparseTransform, Bucketize
        "SLOT_COUNT": 8,
        "SLOT_FUNCS": "64'h0807060300000101",
        "SLOT_DEPTH": 2,  # two requests fill a slot queue (full_slot_queue_passed)
        "SLOT_POLICY": {"rr": 0, "jsq": 1, "runtime": 2}[policy],
    }
    run("offrac_request_path", "tb_request_path", BUILD / f"request-path-slots-{policy}", params, env)


def test_minmax_cycles() -> None:
    """Min-max at 1 KB and 16 KB (OffRAC Table 5's sizes): cycles pinned, results against the software."""
    env = {"OFFRAC_ACCEL_ORACLE": str(accel_oracle())}
    run("offrac_accel_minmax", "tb_accel_minmax_cycles", BUILD / "minmax-cycles", {"MAX_BEATS": 256}, env)


def test_mapid_cycles() -> None:
    """MapId at 1 KB (seed 001 Table II's size) and 16 KB: cycles pinned, results against the software."""
    env = {"OFFRAC_ACCEL_ORACLE": str(accel_oracle())}
    params: dict[str, object] = {"TABLE_BITS": 10, "MAX_BEATS": 256}
    run("offrac_accel_mapid", "tb_accel_mapid_cycles", BUILD / "mapid-cycles", params, env)


def test_sparse_cycles() -> None:
    """SparseTransform at 1 KB (seed 001 Table II's size) and 16 KB: cycles pinned, results against the
    software."""
    env = {"OFFRAC_ACCEL_ORACLE": str(accel_oracle())}
    run("offrac_accel_sparse", "tb_accel_sparse_cycles", BUILD / "sparse-cycles", {"MAX_BEATS": 256}, env)


# Parameter sets that must not build (the modules' elaboration checks), each beside a base set that
# builds: (top, base, the bad parameters, what Icarus names (the missing module), what Verilator prints)
DISPATCHER_BASE: dict[str, object] = {
    "BUF_BYTES": 512,
    "MAX_PAYLOAD": 400,
    "SMALL_MAX": 264,
    "SMALL_BYTES": 300,
}
PATH_BASE: dict[str, object] = {
    "BUF_BYTES": 1024,
    "MAX_PAYLOAD": 512,
    "SMALL_MAX": 320,
    "SMALL_BYTES": 512,
    "MAPID_TABLE_BITS": 6,
}
BAD_PARAMETERS = [
    (
        "offrac_dispatcher",
        DISPATCHER_BASE,
        {"SMALL_BYTES": 200},
        "SMALL_BYTES_below_SMALL_MAX",
        "is below SMALL_MAX",
    ),
    (
        "offrac_dispatcher",
        DISPATCHER_BASE,
        {"MAX_PAYLOAD": 513},
        "MAX_PAYLOAD_above_BUF_BYTES",
        "exceeds BUF_BYTES",
    ),
    ("offrac_dispatcher", DISPATCHER_BASE, {"BUF_POLICY": 3}, "BUF_POLICY_not_0_1_2", "BUF_POLICY (3)"),
    (
        "offrac_dispatcher",
        DISPATCHER_BASE,
        {"BUF_COUNT": 8, "BUF_WIDTH": 2},
        "BUF_COUNT_or_BUF_WIDTH",
        "BUF_COUNT (8)",
    ),
    ("offrac_dispatcher", DISPATCHER_BASE, {"CONN_COUNT": 0}, "CONN_COUNT_or_CONN_WIDTH", "CONN_COUNT (0)"),
    (
        "offrac_request_path",
        PATH_BASE,
        {"SMALL_BYTES": 1088},
        "SMALL_BYTES_above_BUF_BYTES",
        "exceeds BUF_BYTES (1024)",
    ),
    ("offrac_request_path", PATH_BASE, {"DESC_DEPTH": 0}, "DESC_DEPTH_below_1", "DESC_DEPTH (0)"),
    ("offrac_request_path", PATH_BASE, {"SLOT_POLICY": 3}, "POLICY_not_0_1_2", "POLICY (3)"),
]


def elaborate(tool: str, top: str, parameters: dict[str, object]) -> subprocess.CompletedProcess[str]:
    """Build `top` with `parameters` as the benches (Icarus) and the Verilated model (Verilator's
    flags of crates/rtl-model/build.rs) do, without simulating."""
    sources = [str(RTL / f"{m}.v") for m in (top, *SUBMODULES.get(top, ()))]
    if tool == "iverilog":
        out = BUILD / "bad-parameters" / f"{top}.vvp"
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = ["iverilog", "-g2012", "-o", str(out), "-s", top]
        cmd += [f"-P{top}.{k}={v}" for k, v in parameters.items()]
    else:
        cmd = ["verilator", "--lint-only", "-Wno-fatal", "-Werror-USERERROR", "-Wno-lint", "-Wno-style"]
        cmd += ["--top-module", top, *(f"-G{k}={v}" for k, v in parameters.items())]
    return subprocess.run([*cmd, *sources], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("tool", ["iverilog", "verilator"])
@pytest.mark.parametrize(("top", "base", "bad", "icarus_says", "verilator_says"), BAD_PARAMETERS)
def test_bad_parameters_fail_to_build(
    tool: str,
    top: str,
    base: dict[str, object],
    bad: dict[str, object],
    icarus_says: str,
    verilator_says: str,
) -> None:
    """A parameter set the node's configuration would refuse fails at elaboration, naming the rule;
    the same top with the base set builds."""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    good = elaborate(tool, top, base)
    assert good.returncode == 0, good.stderr
    res = elaborate(tool, top, {**base, **bad})
    assert res.returncode != 0, f"{top} with {bad} built"
    said = icarus_says if tool == "iverilog" else verilator_says
    assert said in res.stdout + res.stderr, res.stdout + res.stderr


def run(
    toplevel: str,
    bench: str,
    build_dir: Path,
    parameters: dict[str, object],
    env: dict[str, str],
    testcase: str | None = None,
) -> None:
    runner = get_runner("icarus")
    runner.build(
        sources=[RTL / f"{m}.v" for m in (toplevel, *SUBMODULES.get(toplevel, ()))],
        parameters=parameters,
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
        extra_env=env,
        testcase=testcase,
    )
    tests, failed = get_results(Path(results))
    assert tests > 0 and failed == 0, f"{failed} of {tests} cocotb tests failed"


def core_traces(kind: str, name: str, *config: str) -> Path:
    """Traces from the sans-IO core (crates/core/examples/rtl_trace.rs) for one RTL configuration."""
    out = BUILD / "traces" / f"{name}-{TRACES}-{TRACE_SEED}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    workspace_build()
    with open(out, "w") as f:
        subprocess.run(
            [EXAMPLES / "rtl_trace", kind, str(TRACES), str(TRACE_SEED), *config],
            stdout=f,
            check=True,
            cwd=RTL.parent,
        )
    return out


def replay_against_software(
    name: str,
    bench: str,
    kind: str,
    example: str,
    traces: int,
    count_var: str,
    testcase: str | None = None,
) -> None:
    """Run `name`'s own bench (or its `testcase` alone) with its replay against the software:
    `example` (in crates/core/examples) answers the same inputs; `traces` of them, counted in
    `count_var`."""
    workspace_build()
    summary = BUILD / "traces" / f"{kind}-{traces}-{TRACE_SEED}.summary.json"
    summary.parent.mkdir(parents=True, exist_ok=True)
    env = {
        f"OFFRAC_{example.upper()}": str(EXAMPLES / example),
        count_var: str(traces),
        "OFFRAC_RTL_TRACE_SEED": str(TRACE_SEED),
        "OFFRAC_TRACE_SUMMARY": str(summary),
    }
    build = BUILD / (name if testcase is None else f"{name}-{testcase}")
    run(name, bench, build, PARAMETERS[name], env, testcase=testcase)
    print(kind, json.loads(summary.read_text()))


def test_dispatcher() -> None:
    """The dispatcher's own bench, including its replay against `Engine` itself
    (crates/core/examples/engine_replay.rs answers the same beats)."""
    replay_against_software(
        "offrac_dispatcher",
        "tb_dispatcher",
        "dispatcher-engine",
        "engine_replay",
        DISPATCHER_TRACES,
        "OFFRAC_RTL_DISPATCHER_TRACES",
    )


def test_dispatcher_line_rate() -> None:
    """The dispatcher's payload a beat a cycle for a 4 KB request (a build that admits one)."""
    name = "offrac_dispatcher"
    params = PARAMETERS[name] | {"BUF_BYTES": 8192, "MAX_PAYLOAD": 4096}
    run(name, "tb_dispatcher", BUILD / "dispatcher-line-rate", params, {}, testcase="line_rate_long_request")


def test_chain_router() -> None:
    """The chain router's own bench, including its replay against the software node
    (crates/core/examples/chain_replay.rs decides what comes after the same hops)."""
    replay_against_software(
        "offrac_chain_router",
        "tb_chain_router",
        "router-engine",
        "chain_replay",
        ROUTER_TRACES,
        "OFFRAC_RTL_ROUTER_TRACES",
    )


def test_request_path_chains() -> None:
    """Chains of 1..6 hops through the whole request path (dispatcher, pool, slot stage,
    accelerators, chain router, egress) against `Engine` and the shipping kernels
    (crates/core/examples/path_replay.rs answers the same segments)."""
    replay_against_software(
        "offrac_request_path",
        "tb_request_path",
        "path-engine",
        "path_replay",
        PATH_TRACES,
        "OFFRAC_RTL_PATH_TRACES",
        testcase="engine_replay",
    )


# (buffers, bytes each, policy): the three policies, a one-buffer pool, small buffers that fill.
POOL_CONFIGS = [
    (4, 1000, "naive-rr"),
    (3, 256, "eligible-rr"),
    (4, 1000, "jsb"),
    (1, 64, "eligible-rr"),
    (6, 4096, "jsb"),
]
POLICY_CODE = {"naive-rr": 0, "eligible-rr": 1, "jsb": 2}


@pytest.mark.parametrize(("buffers", "capacity", "policy"), POOL_CONFIGS)
def test_pool_admit(buffers: int, capacity: int, policy: str) -> None:
    name = f"pool-{buffers}x{capacity}-{policy}"
    traces = core_traces("pool", name, str(buffers), str(capacity), policy)
    summary = BUILD / "traces" / f"{name}.summary.json"
    params = {"BUF_COUNT": buffers, "BUF_BYTES": capacity, "POLICY": POLICY_CODE[policy]}
    env = {"OFFRAC_TRACES": str(traces), "OFFRAC_TRACE_SUMMARY": str(summary)}
    run("offrac_pool_admit", "tb_pool_admit", BUILD / name, params, env)
    print(name, json.loads(summary.read_text()))


# (function of each slot, queue bytes, policy): two functions on three slots and one
# on one, both policies; one slot alone; five slots of three functions.
SLOT_CONFIGS = [
    ((0, 1, 0, 0), 300, "rr"),
    ((0, 1, 0, 0), 300, "jsq"),
    ((2,), 100, "rr"),
    ((1, 0, 2, 1, 0), 1000, "jsq"),
    ((1, 0, 2, 1, 0), 1000, "rr"),
]


@pytest.mark.parametrize(("funcs", "capacity", "policy"), SLOT_CONFIGS)
def test_slot_stage(funcs: tuple[int, ...], capacity: int, policy: str) -> None:
    name = f"slots-{'-'.join(map(str, funcs))}x{capacity}-{policy}"
    traces = core_traces("slots", name, ",".join(map(str, funcs)), str(capacity), policy)
    summary = BUILD / "traces" / f"{name}.summary.json"
    packed = sum(f << (8 * i) for i, f in enumerate(funcs))
    params = {
        "SLOT_COUNT": len(funcs),
        "SLOT_FUNCS": f"{8 * len(funcs)}'h{packed:x}",
        "QUEUE_BYTES": capacity,
        "DEPTH": 8,  # as rtl_trace.rs assumes
        "POLICY": {"rr": 0, "jsq": 1}[policy],
    }
    env = {"OFFRAC_TRACES": str(traces), "OFFRAC_TRACE_SUMMARY": str(summary)}
    run("offrac_slot_stage", "tb_slot_stage", BUILD / name, params, env)
    print(name, json.loads(summary.read_text()))


@pytest.mark.parametrize("policy", ["rr", "jsq", "runtime"])
def test_selector(policy: str) -> None:
    """tb_selector against selector.rs; "runtime": one build (POLICY 2) with the policy input 0 and 1."""
    funcs = (1, 0, 2, 1, 0, 1)
    params = {
        "SLOT_COUNT": len(funcs),
        "SLOT_FUNCS": f"{8 * len(funcs)}'h{sum(f << (8 * i) for i, f in enumerate(funcs)):x}",
        "QUEUE_BYTES": 1000,
        "POLICY": {"rr": 0, "jsq": 1, "runtime": 2}[policy],
    }
    env = {"OFFRAC_SELECTOR_RUNTIME": "1"} if policy == "runtime" else {}
    run("offrac_selector", "tb_selector", BUILD / f"selector-{policy}", params, env)


@pytest.mark.skipif(not os.environ.get("OFFRAC_RTL_FULL"), reason="long: make rtl-mapid-full")
def test_mapid_builtin_dictionary() -> None:
    """MapId at its default size with the node's 32,768 built-in keys, against the software."""
    env = {"OFFRAC_ACCEL_ORACLE": str(accel_oracle())}
    run("offrac_accel_mapid", "tb_accel_mapid_builtin", BUILD / "mapid-builtin", {"MAX_BEATS": 16}, env)
