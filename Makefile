# The two commands of the quick start: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ncclcheck-installed

.PHONY: demo test test-fast install lint bench clean

# The suite's two tiers: the pure one (no process, socket, namespace or terminal: tests/conftest.py holds it to
# that) and the integration one (real torchrun, py-spy, network namespaces, SLURM, the TUI in a terminal).
# `make test` runs both on TEST_JOBS workers (pytest-xdist); `make test-fast` the pure tier alone, in about 30 s.
# Three workers on two cores: most of the integration tier waits on real jobs (a hung job costs no CPU).
TEST_JOBS ?= 3

# torch is installed only when none is importable, and then exactly 2.13.0 (a CPU wheel);
# pip must never resolve the open `torch>=2.2` range into a fresh multi-GB CUDA install.
$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

install: $(STAMP)

demo: install
	-$(VENV)/bin/ncclcheck env
	$(VENV)/bin/ncclcheck smoke --nproc 2 --backend gloo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadgroup --durations=25

test-fast: lint
	$(PY) -m pytest -m "not integration"

bench: install
	$(PY) benchmarks/bench_env.py
	$(PY) benchmarks/bench_smoke.py
	$(PY) benchmarks/bench_logs.py --size-mb 256
	$(PY) benchmarks/bench_watch.py
	$(PY) benchmarks/bench_watch_verdict.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
