# The two commands of the README: `make demo` and `make test`. Both set up .venv themselves.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat setup.cfg pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test unit lint sample-config clean

$(STAMP): setup.cfg pyproject.toml
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "novasched needs Python 3.11 or newer; $(PY) is $$($(PY) -V 2>&1). Run: make PY=python3.11 $(MAKECMDGOALS)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,demo]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/novasched-manage demo

test: $(STAMP)
	bash scripts/ensure-services.sh
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -q -p no:cacheprovider tests

# the contributor's loop: every unit test, on two processes, no service needed
unit: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -n 2 -m unit tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

sample-config: $(STAMP)
	$(BIN)/oslo-config-generator --namespace novasched --output-file etc/novasched.conf.sample

clean:
	rm -rf $(VENV) build *.egg-info
