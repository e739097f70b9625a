# One command runs the example, one runs the tests; both build .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: example test quick lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev,otel,metrics,console,test-observability,fast]'
	touch $(STAMP)

example: $(STAMP)  ## run the example host on an embedded fakeredis
	$(PY) -m scheduler_example

lint: $(STAMP)
	$(PY) -m ruff check sharedos_redis scheduler_example tests $(wildcard bench)
	$(PY) -m mypy

test: lint  ## lint, type-check and run every test (real Redis too when REDIS_URL is set)
	$(PY) -m pytest -q

quick: $(STAMP)  ## tests without the slow process/crash suites
	$(PY) -m pytest -q -m "not slow"

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
