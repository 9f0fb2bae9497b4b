# edgeforge — two commands set everything up on a fresh machine:
#   make demo   environment, train the digits example, build it for three targets, bench it on a
#               local sshd device, print the results
#   make test   environment, then the default test suite (well under 20 minutes on 2 cores)
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.10 2>/dev/null || echo python3)
VENV := .venv
BIN := $(VENV)/bin
EF := $(BIN)/edgeforge
PIP_FLAGS ?= -q

.PHONY: venv demo test test-slow test-zoo test-all bench-quant clean train

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 10), "edgeforge needs Python 3.10 (paddlelite wheels stop at cp310); set PYTHON=/path/to/python3.10"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_FLAGS) --upgrade pip
	$(BIN)/pip install $(PIP_FLAGS) -e '.[test]'
	@touch $@

examples/digits/digits.pdparams: examples/digits/train.py examples/digits/model.py | venv
	$(BIN)/python examples/digits/train.py

train: examples/digits/digits.pdparams

DEMO_DEVICE := .demo/device

# Build for an ARM board, a Jetson and this host; start a local sshd "device"; bench the
# host-runnable builds on it over SSH (Lite fp32, ONNX fp32, ONNX INT8); write a report.
demo: venv train
	$(EF) build examples/digits --target rpi4
	$(EF) build examples/digits --target jetson-orin
	$(EF) build examples/digits --target linux-x86
	$(EF) build examples/digits --target linux-x86 --precision fp32
	$(EF) build examples/digits --target linux-x86 --backend lite
	$(BIN)/python -m edgeforge.device.localsshd start --dir $(DEMO_DEVICE)
	@status=0; \
	  EDGEFORGE_DEVICES=$(DEMO_DEVICE)/devices.toml $(EF) bench build/digits-linux-x86-lite --device local || status=$$?; \
	  [ $$status -ne 0 ] || EDGEFORGE_DEVICES=$(DEMO_DEVICE)/devices.toml $(EF) bench build/digits-linux-x86-fp32 --device local || status=$$?; \
	  [ $$status -ne 0 ] || EDGEFORGE_DEVICES=$(DEMO_DEVICE)/devices.toml $(EF) bench build/digits-linux-x86 --device local || status=$$?; \
	  $(BIN)/python -m edgeforge.device.localsshd stop --dir $(DEMO_DEVICE); \
	  [ $$status -ne 0 ] || $(EF) report results --out results/report || status=$$?; \
	  exit $$status

test: venv
	$(BIN)/pytest -q

test-slow: venv
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	$(BIN)/pytest -q -m slow

test-zoo: venv
	$(BIN)/pytest -q -m zoo

test-all: venv
	$(BIN)/pytest -q -m ''

bench-quant: venv
	$(BIN)/python benchmarks/quantization.py

clean:
	rm -rf build results .demo
