# The two commands a newcomer needs:
#   make demo   build everything, start a node, drive a mixed load, print the figures
#   make test   build everything and run the whole test suite (Rust + Python)

CARGO ?= cargo
PYTHON ?= python3
# `offrac serve --datapath rtl` (the Verilated RTL request path, docs/rtl.md) is built when
# Verilator is installed (CI installs it); without it the binary answers that flag with an error
# and its Python test is skipped. Set RTL_FEATURES= to leave it out.
RTL_FEATURES ?= $(shell command -v verilator >/dev/null 2>&1 && echo --features offrac-cli/rtl)

.PHONY: build demo test test-rust test-python python-deps experiment-deps lint typecheck api-docs bench-kernels fuzz-deps fuzz rtl-deps rtl-test rtl-traces rtl-mapid-full rtl-synth

build:
	$(CARGO) build --release --workspace --bins --examples $(RTL_FEATURES)

demo: build
	./target/release/offrac demo

python-deps:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e 'python[test,cnn]'

test: build python-deps test-rust test-python

# What the experiments need beyond the tests (not on the test path, not in CI): matplotlib,
# pandas and simpy (the package's `experiments` extra), and mpi4py for the OpenMPI baseline
# of experiments/collectives (it builds against the system OpenMPI: apt openmpi-bin
# libopenmpi-dev).
experiment-deps: python-deps
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e 'python[test,cnn,experiments]' -r experiments/requirements.txt

test-rust:
	$(CARGO) test --release --workspace $(RTL_FEATURES)

test-python:
	OFFRAC_BIN=$(CURDIR)/target/release/offrac $(PYTHON) -m pytest -q python/tests

lint: python-deps
	$(CARGO) fmt --all --check
	cd fuzz && $(CARGO) fmt --check
	$(CARGO) clippy --release --workspace --all-targets $(RTL_FEATURES) -- -D warnings
	$(PYTHON) -m ruff check python
	$(PYTHON) -m ruff format --check python
	$(PYTHON) -m ruff check --config python/pyproject.toml experiments
	$(PYTHON) -m ruff format --config python/pyproject.toml --check experiments
	$(PYTHON) -m ruff check --config python/pyproject.toml rtl
	$(PYTHON) -m ruff format --config python/pyproject.toml --check rtl
	$(PYTHON) -m ruff check --config python/pyproject.toml models
	$(PYTHON) -m ruff format --config python/pyproject.toml --check models
	$(PYTHON) -m ruff check --config python/pyproject.toml fuzz
	$(PYTHON) -m ruff format --config python/pyproject.toml --check fuzz

# The Python package's public API fully typed (pyright's type completeness, from npm), checked
# on a regular (not editable) install in a throw-away venv, as a user would get it.
typecheck:
	rm -rf target/typecheck-venv
	$(PYTHON) -m venv target/typecheck-venv
	target/typecheck-venv/bin/pip install --quiet --disable-pip-version-check ./python
	PATH=$(CURDIR)/target/typecheck-venv/bin:$$PATH pyright --verifytypes offrac --ignoreexternal

# The Python API reference, generated from the docstrings (open target/api-docs/index.html).
api-docs: python-deps
	$(PYTHON) -m pdoc --output-directory target/api-docs offrac

# The kernels under criterion, with the FPGA figures beside them (docs/results.md).
bench-kernels:
	$(CARGO) bench -p offrac-accel --bench kernels

# Fuzzing (docs/fuzzing.md): cargo-fuzz on a nightly toolchain, in fuzz/ (its own workspace).
# `make fuzz` seeds the corpora from docs/vectors, then runs each target FUZZ_SECONDS.
FUZZ_SECONDS ?= 300
FUZZ_TARGETS ?= proto_headers core_engine node_driver accel_inputs
# A dated nightly, so a new nightly cannot turn CI red on its own.
FUZZ_TOOLCHAIN ?= nightly-2026-10-29
CARGO_FUZZ_VERSION = 0.13.2

fuzz-deps:
	rustup toolchain install $(FUZZ_TOOLCHAIN) --profile minimal
	cargo-fuzz --version 2>/dev/null | grep -q ' $(CARGO_FUZZ_VERSION)$$' || \
	    $(CARGO) install --locked cargo-fuzz --version $(CARGO_FUZZ_VERSION)

fuzz:
	$(PYTHON) fuzz/seed_corpora.py
	cd fuzz && $(CARGO) +$(FUZZ_TOOLCHAIN) fuzz build
	@mkdir -p fuzz/target
	@cd fuzz && for t in $(FUZZ_TARGETS); do \
	    $(CARGO) +$(FUZZ_TOOLCHAIN) fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	        >target/fuzz-$$t.log 2>&1 || { tail -n 60 target/fuzz-$$t.log; echo "fuzz: $$t FAILED (fuzz/artifacts/$$t/)"; exit 1; }; \
	    awk -v t=$$t '/^stat::number_of_executed_units/ {n = $$2} /^Done [0-9]+ runs in/ {s = $$5} \
	        END {printf "fuzz: %-14s %9d executions in %4d s, no crash\n", t, n, s}' target/fuzz-$$t.log; \
	done

# Hardware (rtl/, issue #12): cocotb testbenches on Icarus Verilog (apt: iverilog).
rtl-deps:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -r rtl/requirements.txt

rtl-test: rtl-deps
	$(PYTHON) -m pytest -q rtl/tests

# The core-trace replay at length, divergence counts printed per configuration: RTL_TRACES
# traces from the sans-IO core per pool and slot-stage configuration (5 + 5), the dispatcher's
# replay against Engine (RTL_DISPATCHER_TRACES, segments: its traces are the slowest), the
# chain router's against the software node (RTL_ROUTER_TRACES, ten hops a trace) and chains
# through the whole request path against Engine (RTL_PATH_TRACES, 1.5 s a trace at a load of 8:
# 5 minutes). CI (rtl-test) runs 25 of each. The defaults: 10,200 traces, 7 minutes at a load
# average of 2 plus the path's 5 (docs/rtl.md).
RTL_TRACES ?= 600
RTL_DISPATCHER_TRACES ?= 200
RTL_ROUTER_TRACES ?= 3800
RTL_PATH_TRACES ?= 200
RTL_TRACE_SEED ?= 2
rtl-traces: rtl-deps
	@mkdir -p rtl/build
	OFFRAC_RTL_TRACES=$(RTL_TRACES) OFFRAC_RTL_DISPATCHER_TRACES=$(RTL_DISPATCHER_TRACES) \
	    OFFRAC_RTL_ROUTER_TRACES=$(RTL_ROUTER_TRACES) OFFRAC_RTL_PATH_TRACES=$(RTL_PATH_TRACES) \
	    OFFRAC_RTL_TRACE_SEED=$(RTL_TRACE_SEED) \
	    $(PYTHON) -m pytest -q -s rtl/tests \
	    -k 'pool_admit or slot_stage or dispatcher or chain_router or request_path_chains' \
	    > rtl/build/traces.log; \
	    status=$$?; grep -E '(pool|slots|dispatcher|router|path)-.*traces|passed|failed' rtl/build/traces.log; exit $$status

# MapId at full size with the node's 32,768 built-in keys, against the software (long: ~130k cycles).
rtl-mapid-full: rtl-deps
	OFFRAC_RTL_FULL=1 $(PYTHON) -m pytest -q -s rtl/tests -k mapid_builtin

# LUT/FF/DSP/BRAM of each RTL module on UltraScale+ (apt: yosys); reports in rtl/build/.
# Flattened (a top counts its submodules); BRAM in 36 Kb blocks (a RAMB18 counts half);
# LUTRAM: distributed-RAM cells (RAM32M16 etc.), not in the LUT count. RTL_TOPS="a b" synthesises only those.
RTL_SYNTH_TOPS = offrac_req_header_parse offrac_resp_header_build offrac_accel_echo offrac_minmax_elem offrac_accel_minmax offrac_accel_topk \
    offrac_axis_reg offrac_result_buffer offrac_accel_sparse offrac_accel_bucketize offrac_accel_mapid \
    offrac_pool_admit offrac_selector offrac_slot_queue offrac_slot_stage offrac_dispatcher offrac_chain_router offrac_request_path
rtl-synth:
	@mkdir -p rtl/build
	@for top in $(or $(RTL_TOPS),$(RTL_SYNTH_TOPS)); do \
	    yosys -q -p "read_verilog rtl/offrac_*.v; synth_xilinx -family xcup -flatten -top $$top; tee -q -o rtl/build/$$top.synth.txt stat" || exit 1; \
	    awk -v top=$$top '$$1 ~ /^LUT[1-6]$$/ {lut += $$2} $$1 ~ /^FD/ {ff += $$2} $$1 ~ /^DSP/ {dsp += $$2} \
	        $$1 ~ /^RAMB36/ {bram += $$2} $$1 ~ /^RAMB18/ {bram += $$2 / 2} $$1 ~ /^RAM(32|64|128|256)/ {lutram += $$2} \
	        END {printf "%-28s LUT %5d  FF %5d  DSP %3d  BRAM %5.1f  LUTRAM %4d\n", top, lut, ff, dsp, bram, lutram}' rtl/build/$$top.synth.txt; \
	done
