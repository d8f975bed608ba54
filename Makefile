# Each target creates .venv when it is missing and installs the project into it.
VENV ?= .venv
PY := $(VENV)/bin/python
# On machines without a local CPU wheel, override e.g. TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu".
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: install test demo bench lint

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest -q $(PYTEST_ARGS)

demo: $(VENV)/.installed
	$(VENV)/bin/divrl toy --env bandit --methods grpo,ips --seeds 3 --rewards 1,2,3,4 --out demo_out

bench: $(VENV)/.installed
	$(PY) benchmarks/toy_reproduction.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tasks tests benchmarks
