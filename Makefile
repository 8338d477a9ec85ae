# Everything runs from a project-local virtualenv, created on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench bench-e2e clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

# The main job on the bundled defaults: what each example Job becomes, and why each denied one is denied.
demo: $(STAMP)
	@echo "== trainadmit check examples/*.yaml  (policies/ = the bundled defaults)"
	@$(BIN)/trainadmit check examples/*.yaml; rc=$$?; echo "(exit code $$rc: 0 all admitted, 1 some denied, 2 unreadable)"; test $$rc -le 1
	@echo
	@echo "== what llama-pretrain.yaml becomes (trainadmit check -o yaml)"
	@$(BIN)/trainadmit check examples/llama-pretrain.yaml -o yaml

# Two pytest workers (the machines have two cores); tests that share one heavy resource carry an
# xdist_group mark so that a single worker starts it.
test: $(STAMP)
	$(BIN)/ruff check webhook certs tests bench
	$(BIN)/pytest -n 2 --dist loadgroup

bench: $(STAMP)
	$(BIN)/python bench/engine.py

# Job creates through a real kube-apiserver: no webhook, the no-op pair, the replayed patch, trainadmit.
# KUBEBUILDER_ASSETS names a folder with kube-apiserver and etcd (default: the workplace's, as in .ci/run).
bench-e2e: $(STAMP)
	@test -n "$$KUBEBUILDER_ASSETS" || ../shared/k8s/control-plane assets $(VENV)/k8s-assets >/dev/null
	KUBEBUILDER_ASSETS=$${KUBEBUILDER_ASSETS:-$(CURDIR)/$(VENV)/k8s-assets} $(BIN)/python bench/e2e.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
