# Two set-up commands: `make demo` and `make test`. Everything else builds on them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: compiled demo test unit typecheck lint bench deep fuzz docs clean java zookeeper chromium screenshots

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "statechan needs Python >= 3.11")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark,bench,zk,balance,explore]'
	touch $(STAMP)

java:
	@scripts/ensure-java.sh

zookeeper:
	@scripts/ensure-zookeeper.sh

chromium:
	@scripts/ensure-chromium.sh

demo: $(STAMP) java
	$(PY) -m statechan demo

# --dist loadgroup: each file of conftest.SHARED_SET_UP whole on one worker (the Spark cluster's), the rest spread as usual;
# --durations: the slowest tests, to keep the whole run within its 15 minutes
test: $(STAMP) java zookeeper chromium
	$(PY) -m pytest -q -n auto --dist loadgroup --durations=25
	$(PY) -m mypy
	$(PY) -m ruff check statechan tests properties conftest.py
	$(PY) -m statechan graph --check-docs docs

# optional: the checker's kernel compiled with mypyc into build/compiled (import statechan uses it
# while its sources are unchanged; STATECHAN_KERNEL=pure turns it off), then checked against the
# pure modules (tests/test_compiled.py on the whole build)
compiled: $(STAMP)
	$(PY) -c "import setuptools" 2>/dev/null || $(PY) -m pip install --quiet setuptools
	$(PY) build_compiled.py
	$(PY) -m pytest -q -p no:xdist tests/test_compiled.py

unit: $(STAMP)
	$(PY) -m pytest -q -x

typecheck: $(STAMP)
	$(PY) -m mypy

lint: $(STAMP)
	$(PY) -m ruff check statechan tests properties conftest.py

BENCH_ARGS ?=
bench: $(STAMP)
	$(PY) -m statechan.bench $(BENCH_ARGS)

deep: $(STAMP)
	HYPOTHESIS_PROFILE=deep $(PY) -m pytest -q

FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	$(PY) -m tests.fuzz --seconds $(FUZZ_SECONDS)

# the generated pages, then the site (MkDocs, strict: a broken link or reference fails) into site/;
# make test builds it strictly too (tests/test_docs.py) and runs the guides' examples
docs: $(STAMP)
	$(PY) -m statechan graph --write-docs docs
	$(PY) -m statechan traces schema > traces/trace.schema.json
	$(PY) -m statechan traces report-schema > traces/report.schema.json
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site
	@echo "the site is in site/: open site/index.html"

# the pages' pictures in docs/pages (headless Chromium)
screenshots: $(STAMP) chromium
	$(PY) -m tests.screenshots docs/pages

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info site
