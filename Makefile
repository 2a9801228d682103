# Two commands do all set-up on a fresh Debian machine with Python 3.11:
#   make demo   create .venv, install, build the demo warehouse, serve the dashboard
#   make test   create .venv if needed, install, run the whole suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install bench clean lint

$(PY):
	$(PYTHON) -m venv $(VENV)

# uv installs in seconds; plain pip is the fallback when uv cannot be had. Every install builds pyspark's sdist
# (the lake tests' Spark) into a new 1.4 GB revision of uv's cache: 40 of them filled 55 GB of the disk that CI
# shares, so the revisions no install uses any more are pruned after each one. The simulator's numba kernels are
# compiled once here (about 35 s) rather than by the first what-if, or by every test worker that reaches one first.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip uv || true
	if $(VENV)/bin/uv --version >/dev/null 2>&1; then \
	  $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -e '.[dev]' && \
	  { $(VENV)/bin/uv cache prune -q || true; }; \
	else \
	  $(PY) -m pip install -q -e '.[dev]'; \
	fi
	$(PY) -m models.simulation.warm
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/gpuledger demo

# One worker per core and one more (pytest-xdist): about a quarter of the suite's time is spent waiting (the real
# Slurm's job mix, browsers, servers), and the extra worker computes meanwhile (2 cores, 2026-12-06: 602-613 s
# against 660 s with one worker per core, 672 s against 695 s on a clean clone; docs/BENCHMARKS.md). A module
# stays on one worker, since its tests share fixtures and servers; the two modules that take turns on the real
# Slurm are one unit (tests/conftest.py), so no worker waits for the other's lock. xdist starts the modules with
# the most tests first (its loadscope reorder): tests/conftest.py's order is kept only among equals (keeping it
# all measured slower).
# Bytecode is written even where the environment says not to: the tests start many Python processes (CLI,
# dashboard, service), and each would otherwise compile the whole stack again (about 4 s of CPU apiece).
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -n $(WORKERS) --dist loadfile --durations=25 $(PYTEST_ARGS)

bench: $(STAMP)
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
