# otel-ebpf: `make run` installs everything and runs the agent with config/default.yaml;
# `make test` installs everything and runs the whole test suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
APT_PACKAGES := clang llvm libbpf-dev libbpf1 bpftool libelf-dev libelf1 make curl libcap2-bin util-linux python3-venv
CONFIG ?= config/default.yaml
PYTEST_ARGS ?=

.PHONY: run test install deps venv bpf check clean

run: install
	$(VENV)/bin/otel-ebpf run -c $(CONFIG)

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

check: install
	$(VENV)/bin/otel-ebpf check

install: deps venv bpf

# System packages (Debian/Ubuntu): the BPF toolchain and libbpf. Skipped when present.
deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

bpf:
	$(MAKE) -C bpf

clean:
	$(MAKE) -C bpf clean
	rm -rf $(VENV) *.egg-info
