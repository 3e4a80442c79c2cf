# The two commands of the quick start: `make demo` and `make test`.
VENV ?= .venv

# Bytecode is cached (__pycache__/, ignored by git) even where the environment says not to (this machine sets
# PYTHONDONTWRITEBYTECODE=1): the suite starts about a thousand Python processes, and without the cache each one
# compiles ncclcheck's sources again (0.2 of the 0.45 CPU-seconds `ncclcheck run` takes to start) and every xdist
# worker rewrites every test module.
unexport PYTHONDONTWRITEBYTECODE
PY := $(VENV)/bin/python
# The interpreter .venv is made from: the system's python3 where it has venv (distributions build theirs with PGO and
# LTO: `import torch` takes 1.21 CPU-seconds with it against 1.46 with a default pyenv build of the same 3.11 here, and
# the suite starts about a thousand Python processes), else python3 on PATH. `make test PYTHON=python3.12` picks one.
PYTHON ?= $(shell /usr/bin/python3 -c "import sys, venv; sys.exit(sys.version_info < (3, 9))" 2>/dev/null \
	&& echo /usr/bin/python3 || echo python3)
STAMP := $(VENV)/.ncclcheck-installed

.PHONY: demo test suite test-fast install lint bench clean gpu-wheels gpu-check gpu-check-dry

# The suite's two tiers, each a folder: tests/unit/<layer>/, the pure one (no process, socket, namespace or terminal:
# tests/conftest.py holds it to that), and tests/integration/<command>/ (real torchrun, py-spy, network namespaces,
# SLURM, the TUI in a terminal; conftest marks every test there `integration`). `make test` runs both on TEST_JOBS
# workers (pytest-xdist, --dist loadgroup keeps each xdist_group on one worker); `make test-fast` runs tests/unit alone.
# Four workers on two cores: most of the integration tier waits on real jobs (a hung job costs no CPU), and the
# test jobs step without spinning (clean clone, 2 cores: 3 workers 15:01, 4 workers 14:25, docs/design.md).
TEST_JOBS ?= 4

# torch is installed only when none is importable, and then exactly 2.13.0 (a CPU wheel);
# pip must never resolve the open `torch>=2.2` range into a fresh multi-GB CUDA install.
# A fresh torch's bytecode (16 of pip's 22 seconds, on one core) is compiled beside the other packages' install,
# on the other core; compileall's status is not ours (torch ships files only Python 3.12 parses, as pip's own
# compile step also skips).
TORCH_DIR = $(PY) -c "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])"
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if $(PY) -c "import torch" 2>/dev/null; then \
		$(PY) -m pip install --quiet -e ".[test]"; \
	else \
		$(PY) -m pip install --quiet --no-compile "torch==2.13.0" || exit 1; \
		$(PY) -m compileall -q -q -j 1 "$$($(TORCH_DIR))" & compiling=$$!; \
		$(PY) -m pip install --quiet -e ".[test]"; installed=$$?; \
		wait $$compiling; exit $$installed; \
	fi
	@touch $(STAMP)

install: $(STAMP)

demo: install
	-$(VENV)/bin/ncclcheck env
	$(VENV)/bin/ncclcheck smoke --nproc 2 --backend gloo

# The reference in docs/: a broken link or anchor fails the build (--strict); site/ is ignored by git.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/mkdocs build --strict --quiet --site-dir site

# The lint beside the suite: mypy takes one core for about 15 s, which the suite's start-up (four workers collecting)
# shares; a lint error is printed as soon as it is found, and `make test` fails once both have ended.
test: install
	@$(MAKE) --no-print-directory -j2 lint suite

suite: install
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadgroup --durations=25

test-fast: lint
	$(PY) -m pytest tests/unit

bench: install
	$(PY) benchmarks/bench_env.py
	$(PY) benchmarks/bench_smoke.py
	$(PY) benchmarks/bench_isolate.py
	$(PY) benchmarks/bench_logs.py --size-mb 256
	$(PY) benchmarks/bench_watch.py
	$(PY) benchmarks/bench_watch_verdict.py

# The device check. `make gpu-wheels` here fetches what the lent GPU machine's image lacks into .whl (ignored by git;
# the device call carries it); `make gpu-check` runs there with the image's own python3 and torch and packs what it
# captured into $$OUT/gpu_check.tar.gz; `make gpu-check-dry` runs the same here on gloo/CPU.
GPU_WHEELS = py-spy==0.4.3 textual==8.2.8 platformdirs==4.14.8 mdit-py-plugins==0.7.0
GPU_PLATFORMS = --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 --platform any

gpu-wheels:
	python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		$(GPU_PLATFORMS) -d .whl $(GPU_WHEELS)

gpu-check:
	python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
	PYTHONPATH=/tmp/site:$(CURDIR) PATH=/tmp/site/bin:$$PATH PYTHONUNBUFFERED=1 python3 tools/gpu_check.py

gpu-check-dry: install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) tools/gpu_check.py --dry --cases skip,dies,healthy

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
