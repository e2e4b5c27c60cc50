# Everything installs into .venv from pinned versions (constraints.txt), so a fresh
# machine with Python 3.11+ and make needs nothing else.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test test-slow bench models lock clean

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fleetcache needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fleetcache demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow && FLEETCACHE_HYPOTHESIS_PROFILE=slow $(BIN)/python -m pytest -q -m "not slow" tests/test_properties.py

bench: $(STAMP)
	$(BIN)/python bench/compose_scale.py
	$(BIN)/python bench/agent_throughput.py

# The typed API models in functions/models/, regenerated from the XRDs in apis/.
models: $(STAMP)
	$(BIN)/python -m fleetcache.devtools.apigen

lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^-e' > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
