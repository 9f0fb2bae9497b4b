# edgeforge — two commands set everything up on a fresh machine:
#   make demo   environment, train the digits example, build it for three targets, bench it on a
#               local sshd device, print the results
#   make test   environment, then the default test suite (well under 20 minutes on 2 cores)
SHELL := /bin/bash
# The core runs on Python 3.10-3.12: the distribution's own Python first (Debian 12: 3.11,
# Ubuntu 24.04: 3.12), newest first, then python3.12/3.11/3.10 on PATH. PYTHON=... overrides.
PY_OK := import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))
ifndef PYTHON
PYTHON := $(shell for p in /usr/bin/python3.12 /usr/bin/python3.11 /usr/bin/python3.10 python3.12 python3.11 python3.10; do \
            command -v $$p >/dev/null 2>&1 && $$p -c '$(PY_OK)' 2>/dev/null && { command -v $$p; break; }; done)
endif
# Paddle Lite (paddlelite wheels stop at cp310) gets its own Python 3.10 environment under the
# edgeforge cache: `edgeforge toolchain install lite`. LITE_PYTHON=/path/to/python3.10 picks the
# interpreter (default: python3.10 on PATH, then pyenv's versions).
LITE_PYTHON ?=
VENV ?= .venv
BIN := $(VENV)/bin
EF := $(BIN)/edgeforge
PIP_FLAGS ?= -q
SSHD := $(or $(EDGEFORGE_SSHD),/usr/sbin/sshd)

# $(call apt_or_stop,PACKAGES,WHAT): as root install Debian packages, else stop with the command.
apt_or_stop = if [ "$$(id -u)" = 0 ]; then echo "installing $(1) ($(2))"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; \
	else echo "error: $(2) needs $(1); run: sudo apt-get install -y $(1)" >&2; exit 2; fi

.PHONY: venv lite sshd demo test test-slow suite-models test-zoo test-arm test-web test-all bench-quant clean train

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@[ -x $(BIN)/python ] || [ -n "$(PYTHON)" ] || { echo "error: no Python 3.10-3.12 found; run: sudo apt-get install -y python3 python3-venv (or set PYTHON=...)" >&2; exit 2; }
	@[ -x $(BIN)/python ] || $(PYTHON) -c '$(PY_OK)' || { echo "error: edgeforge needs Python 3.10-3.12; $(PYTHON) is $$($(PYTHON) -V 2>&1); set PYTHON=..." >&2; exit 2; }
	@[ -x $(BIN)/python ] || $(PYTHON) -c 'import ensurepip' 2>/dev/null || { $(call apt_or_stop,python3-venv,python -m venv); }
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_FLAGS) --upgrade pip
	$(BIN)/pip install $(PIP_FLAGS) -e '.[test,lite]'
	@touch $@

# The Paddle Lite toolchain, when a Python 3.10 can be found (ONNX targets work without it).
lite: venv
	@$(EF) toolchain install lite --if-missing $(if $(LITE_PYTHON),--python $(LITE_PYTHON)) || \
	  echo "note: no Paddle Lite toolchain: Lite targets (rpi4, rpi5, android-*) stop with exit 2; ONNX targets work"

# The demo's local device is OpenSSH's sshd on 127.0.0.1: checked first, before anything else runs.
sshd:
	@[ -x $(SSHD) ] || { $(call apt_or_stop,openssh-server,the demo's local device (sshd)); }

examples/digits/digits.pdparams: examples/digits/train.py examples/digits/model.py | venv
	$(BIN)/python examples/digits/train.py

train: examples/digits/digits.pdparams

DEMO_DEVICE := .demo/device

# Build for an ARM board, a Jetson and this host; start a local sshd "device"; bench the
# host-runnable builds on it over SSH (Lite fp32, ONNX fp32, ONNX INT8); write a report.
# Without the Lite toolchain (no Python 3.10 here) the Lite builds are skipped, with a note.
demo: sshd venv lite train
	@if $(EF) doctor --target rpi4 >/dev/null; then \
	  $(EF) build examples/digits --target rpi4 && $(EF) build examples/digits --target linux-x86 --backend lite; \
	else echo "note: no Paddle Lite toolchain; skipping the rpi4 and Lite x86 builds (see make lite)"; fi
	$(EF) build examples/digits --target jetson-orin
	$(EF) build examples/digits --target linux-x86
	$(EF) build examples/digits --target linux-x86 --precision fp32
	$(BIN)/python -m edgeforge.device.provision.localsshd start --dir $(DEMO_DEVICE)
	@status=0; \
	  if [ -f build/digits-linux-x86-lite/manifest.json ] && $(EF) doctor --target rpi4 >/dev/null; then \
	    EDGEFORGE_DEVICES=$(DEMO_DEVICE)/devices.toml $(EF) bench build/digits-linux-x86-lite --device local || status=$$?; fi; \
	  [ $$status -ne 0 ] || EDGEFORGE_DEVICES=$(DEMO_DEVICE)/devices.toml $(EF) bench build/digits-linux-x86-fp32 --device local || status=$$?; \
	  [ $$status -ne 0 ] || EDGEFORGE_DEVICES=$(DEMO_DEVICE)/devices.toml $(EF) bench build/digits-linux-x86 --device local || status=$$?; \
	  $(BIN)/python -m edgeforge.device.provision.localsshd stop --dir $(DEMO_DEVICE); \
	  [ $$status -ne 0 ] || $(EF) report results --out results/report || status=$$?; \
	  exit $$status

test: venv lite
	$(BIN)/pytest -q --durations=40

test-slow: venv
	@command -v chromium >/dev/null 2>&1 || { $(call apt_or_stop,chromium,the HTML report test); }
	$(BIN)/pytest -q -m slow

# Paddle's suites for the zoo's suite models (tests/zoo/suite_models.py): paddleclas, paddleseg,
# paddledet wheels from the registry, --no-deps, into the edgeforge cache
suite-models: venv
	$(BIN)/python tests/zoo/suite_models.py install

test-zoo: venv suite-models
	$(BIN)/pytest -q -m zoo

# The emulated aarch64 device (edgeforge devices emulate): root, Debian's qemu-user-static,
# binfmt-support, debootstrap and zstd. The first run builds the arm64 rootfs (about 10 min) into
# the edgeforge cache; later runs unpack it in seconds.
ARM_PKGS := qemu-user-static binfmt-support debootstrap zstd
test-arm: venv
	@dpkg -s $(ARM_PKGS) >/dev/null 2>&1 || { $(call apt_or_stop,$(ARM_PKGS),the emulated aarch64 device); }
	$(BIN)/pytest -q -m arm tests/arm

# The browser device (transport = "browser"): Debian's chromium and chromium-driver, npm for
# onnxruntime-web (pinned, checked by its sha512 into the edgeforge cache), selenium from the venv.
# npm is looked for as a command: a nodejs from elsewhere (NodeSource) ships its own and conflicts
# with Debian's npm package.
WEB_PKGS := chromium chromium-driver
test-web: venv
	@dpkg -s $(WEB_PKGS) >/dev/null 2>&1 || { $(call apt_or_stop,$(WEB_PKGS),the browser device); }
	@command -v npm >/dev/null 2>&1 || { $(call apt_or_stop,npm,onnxruntime-web from the npm registry); }
	$(EF) toolchain install web --if-missing
	$(BIN)/pytest -q -m web tests/web

test-all: venv
	$(BIN)/pytest -q -m ''

bench-quant: venv
	$(BIN)/python benchmarks/quantization.py

clean:
	rm -rf build results .demo
