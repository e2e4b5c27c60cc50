# Everything installs into .venv from pinned versions (constraints.txt), so a fresh
# machine with Python 3.11+ and make needs nothing else.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test lint test-slow test-random bench models lock clean package test-package push-package

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fleetcache needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fleetcache demo

test: lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow and not package"

# One style (ruff) over everything, and the types (mypy) over the package as it is imported:
# mypy cannot follow the package-dir remap (`agent/` is fleetcache.agent), so the folders are
# linked into build/typecheck/fleetcache/ first.
TYPECHECK := build/typecheck
lint: $(STAMP)
	$(BIN)/ruff check --quiet .
	rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/fleetcache
	ln -s $(CURDIR)/fleetcache/*.py $(TYPECHECK)/fleetcache/
	for folder in apis functions agent devtools; do ln -s $(CURDIR)/$$folder $(TYPECHECK)/fleetcache/$$folder; done
	cd $(TYPECHECK) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml \
		--python-executable $(CURDIR)/$(BIN)/python --no-error-summary -p fleetcache

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow && FLEETCACHE_HYPOTHESIS_PROFILE=slow $(BIN)/python -m pytest -q -m "not slow" tests/test_properties.py

# The property tests (every test file that imports hypothesis) on inputs `make test` never
# draws: its examples are fixed, these come from a seed drawn here and printed, so a failure
# reruns with `make test-random SEED=N` (design/testing.md).
PROPERTY_TESTS := $(shell grep -rl --include='test_*.py' '^from hypothesis import' tests)
test-random: $(STAMP)
	@seed="$(SEED)"; test -n "$$seed" || seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); \
	echo "make test-random: hypothesis seed $$seed"; \
	FLEETCACHE_HYPOTHESIS_PROFILE=random $(BIN)/python -m pytest -q -n 2 --dist loadfile -m "hypothesis and not slow" \
		--hypothesis-seed=$$seed $(PROPERTY_TESTS) \
		|| { echo "make test-random failed with hypothesis seed $$seed: rerun with make test-random SEED=$$seed"; \
		     exit 1; }

# The benches as design/performance.md runs them (the agent's take many minutes; record
# figures from a quiet machine and compare ratios within a run). bench-smoke: the same code
# paths at tiny sizes in seconds (tests/test_bench.py runs them under `make test`).
bench: $(STAMP)
	$(BIN)/python bench/compose_scale.py --sizes 10,100,1000,3000 --repeats 5
	$(BIN)/python bench/compose_deployment.py --replicas 1000 --clusters 500 --repeats 10
	$(BIN)/python bench/agent_throughput.py --size-gib 2 --rounds 3 --json bench/out/agent.json
	$(BIN)/python bench/agent_throughput.py --size-gib 0.5 --rounds 3 --stream-rate 25e6 --json bench/out/agent-capped.json
	$(BIN)/python bench/agent_throughput.py --sizes-gib 1,3 --rounds 3 --json bench/out/agent-marginal.json

.PHONY: bench-smoke
bench-smoke: $(STAMP)
	$(BIN)/python bench/compose_scale.py --smoke
	$(BIN)/python bench/compose_deployment.py --smoke
	$(BIN)/python bench/agent_throughput.py --smoke

# The typed API models in apis/models/, regenerated from the XRDs in apis/.
models: $(STAMP)
	$(BIN)/python -m fleetcache.devtools.apigen

lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^-e' > constraints.txt

# The release, built here with no Docker engine and no crossplane CLI (design/packages.md): both
# images with buildah on locally bootstrapped Debian 12 bases (the Debian tools install
# themselves), both xpkgs around them, all four pushed to a loopback registry and pulled back
# by digest. Outputs in build/package/, each beside its <file>.digest.
PACKAGE := build/package
PACKAGE_OUTPUTS := $(addprefix $(PACKAGE)/,agent.tar function-runtime.tar function-fleetcache.xpkg configuration-fleetcache.xpkg)
package: $(STAMP)
	$(BIN)/python -m fleetcache.devtools.package.images --out $(PACKAGE)
	$(BIN)/python -m fleetcache.devtools.package.xpkg function --runtime $(PACKAGE)/function-runtime.tar \
		--out $(PACKAGE)/function-fleetcache.xpkg
	$(BIN)/python -m fleetcache.devtools.package.xpkg configuration \
		--function-digest "$$(cat $(PACKAGE)/function-fleetcache.xpkg.digest)" --out $(PACKAGE)/configuration-fleetcache.xpkg
	$(BIN)/python -m fleetcache.devtools.package.registry roundtrip $(PACKAGE)

# Run what was built: the images unpacked and started as uid 65532 on a read-only root, the
# xpkgs parsed back (tests/package/). Builds first when an output is missing.
test-package: $(STAMP)
	@for f in $(PACKAGE_OUTPUTS); do test -f $$f || { $(MAKE) package && break; }; done
	$(BIN)/python -m pytest -q -m package tests/package

# Push the released artifacts (make push-package REGISTRY=ghcr.io/fleetcache VERSION=v0.1.0),
# with the credentials of `skopeo login REGISTRY-HOST`; package/README.md has the release.
REGISTRY ?= ghcr.io/fleetcache
VERSION  ?=
push-package: $(STAMP)
	@test -n "$(VERSION)" || { echo "make push-package needs VERSION=vX.Y.Z" >&2; exit 2; }
	@for f in $(PACKAGE_OUTPUTS); do test -f $$f || { $(MAKE) package && break; }; done
	$(BIN)/python -m fleetcache.devtools.package.registry push --registry $(REGISTRY) --version $(VERSION) \
		--folder $(PACKAGE)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
