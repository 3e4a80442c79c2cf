# The two commands of the quick start: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ncclcheck-installed

.PHONY: demo test install lint bench clean

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
	$(PY) -m pytest

bench: install
	$(PY) benchmarks/bench_env.py
	$(PY) benchmarks/bench_smoke.py
	$(PY) benchmarks/bench_logs.py --size-mb 256
	$(PY) benchmarks/bench_watch.py
	$(PY) benchmarks/bench_watch_verdict.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
