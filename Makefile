# Everything runs from a project-local virtualenv, created on first use. Two stamps: the runtime package alone
# (what `make demo` and docs/install.md's `make .venv/.installed` need), and the test extras on top (`make test`).
# The runtime install compiles no bytecode up front (Python compiles what a command imports, on first use: `check`
# never imports most of the Kubernetes client); the test stamp compiles it all, since the suite imports it all.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip install --quiet --disable-pip-version-check
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test lint bench bench-e2e clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --no-compile -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(PIP) -e '.[test]'
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib >/dev/null || true
	touch $(TEST_STAMP)

# The main job on the bundled defaults: what each example Job becomes, and why each denied one is denied.
demo: $(STAMP)
	@echo "== trainadmit check examples/*.yaml  (policies/ = the bundled defaults)"
	@$(BIN)/trainadmit check examples/*.yaml; rc=$$?; echo "(exit code $$rc: 0 all admitted, 1 some denied, 2 unreadable)"; test $$rc -le 1
	@echo
	@echo "== what llama-pretrain.yaml becomes (trainadmit check -o yaml)"
	@$(BIN)/trainadmit check examples/llama-pretrain.yaml -o yaml

# Two pytest workers (the machines have two cores); tests that share one heavy resource carry an
# xdist_group mark so that a single worker starts it. Without KUBEBUILDER_ASSETS (or TRAINADMIT_ALL_TIERS=1)
# this is the fast tier, the one-minute inner loop; CI (.ci/run) sets it and runs every tier (docs/testing.md).
test: $(TEST_STAMP)
	$(BIN)/ruff check webhook certs tests bench
	$(BIN)/pytest -n 2 --dist loadgroup

bench: $(TEST_STAMP)
	$(BIN)/python bench/engine.py

# Job creates through a real kube-apiserver: no webhook, the no-op pair, the replayed patch, trainadmit.
# KUBEBUILDER_ASSETS names a folder with kube-apiserver and etcd (default: the workplace's, as in .ci/run).
bench-e2e: $(TEST_STAMP)
	@test -n "$$KUBEBUILDER_ASSETS" || ../shared/k8s/control-plane assets $(VENV)/k8s-assets >/dev/null
	KUBEBUILDER_ASSETS=$${KUBEBUILDER_ASSETS:-$(CURDIR)/$(VENV)/k8s-assets} $(BIN)/python bench/e2e.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
