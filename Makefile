# Two entry points, each doing its own set-up on a fresh machine:
#   make demo   - compile BERT-base with fxvino and print the comparison with eager PyTorch
#   make test   - run the test suite (CI runs this)
# The virtual environment is (re)built whenever pyproject.toml changes.

PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-avx2 qemu docs lint venv clean venv-optimum bench-generate bench-quantization java test-serving bench-serving \
	browser test-diffusion bench-diffusion

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	# The CPU build of torch first (pinned), so the project's range installs nothing more.
	$(VENV)/bin/python -m pip install -q torch==2.13.0
	$(VENV)/bin/python -m pip install -q -e '.[test]' -c benchmarks/constraints-torch.txt
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python -m fxvino.tools.demo

# The suite in TEST_WORKERS processes (pytest-xdist), each test file in one of them so that its
# module fixtures (an exported LLM, a server) are built once: on 2 cores 16.5 min instead of 27,
# since most of a test's time is single-threaded tracing and compiling. TEST_WORKERS=0 runs it in
# this process. The numerics pass (test-avx2) runs in as many emulated workers.
TEST_WORKERS ?= 2
test: $(STAMP) java browser
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python -m sphinx -W --keep-going -E -q -b html docs docs/_build/html
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile
	@if [ "$$(uname -m)" = x86_64 ]; then $(MAKE) --no-print-directory test-avx2; \
	else echo "test-avx2 skipped: QEMU's user mode runs this x86-64 venv only on an x86-64 host"; fi

# The documentation site (Sphinx with MyST Markdown, docs/) into docs/_build/html. Warnings are
# errors, so a broken link, cross-reference or docstring fails it; the user guide's Python blocks
# run in `make test` (docs/conftest.py, Sybil).
docs: $(STAMP)
	$(VENV)/bin/python -m sphinx -W --keep-going -E -q -b html docs docs/_build/html
	@echo "docs/_build/html/index.html"

# The numerics tests (pytest -m numerics) as an AVX2-only CPU, whatever this machine is: QEMU's
# user-mode emulation runs the Python process on a Haswell model, and OpenVINO's CPU plugin then
# picks its AVX2 kernels and computes bf16 in f32 (the class most laptops and many cloud VMs are).
# TCG emulates up to AVX2, so the AVX-512 and AMX classes are only tested on such machines. The
# features dropped from the model are ones TCG cannot emulate (it warns about each otherwise).
# The processes QEMU's Python starts (the C++ compiler Inductor runs) run natively: Inductor's
# -march=native would then compile the host's AVX-512 into kernels the emulated CPU cannot run.
QEMU_CPU ?= Haswell-noTSX,-pcid,-x2apic,-tsc-deadline,-invpcid
# With TEST_WORKERS > 0 the tests run in that many xdist workers, each an emulated Python
# (tests/qemu-python; tests/conftest.py stops a worker that finds itself native): on 2 cores
# 153 tests in 4:53, where 146 took 6:22-8:31 in one emulated process.
AVX2_ENV = FXVINO_CONFORMANCE=off FXVINO_EMULATED_CPU=avx2 TORCHINDUCTOR_CPP_MARCH=haswell \
	QEMU_CPU=$(QEMU_CPU) VENV_PYTHON=$(CURDIR)/$(VENV)/bin/python
test-avx2: $(STAMP) qemu
	@if [ "$(TEST_WORKERS)" = 0 ]; then \
	  $(AVX2_ENV) qemu-x86_64 -cpu $(QEMU_CPU) $(VENV)/bin/python -m pytest -q -p no:cacheprovider -m numerics; \
	else \
	  $(AVX2_ENV) $(VENV)/bin/python -m pytest -q -p no:cacheprovider -m numerics --dist load \
	    --tx $(TEST_WORKERS)*popen//python=$(CURDIR)/tests/qemu-python; \
	fi

qemu:
	@command -v qemu-x86_64 >/dev/null || { \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq qemu-user; }

# The web UI's test (tests/diffusion/test_txt2img_app.py) drives a headless Chromium: the system's
# Chromium and chromedriver, installed only when missing (Debian/Ubuntu package names).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver; }

# Every diffusion test, including the heavy end-to-end ones (SDXL, PixArt, img2img, inpainting,
# ControlNet, every LoRA operation, the model cache with LoRA switching): a few minutes.
test-diffusion: $(STAMP) browser
	FXVINO_DIFFUSION=full $(VENV)/bin/python -m pytest -q tests/diffusion

# SD 1.5-sized UNet/VAE with random weights under each contender (long: a quiet machine).
bench-diffusion: $(STAMP)
	$(VENV)/bin/python -m benchmarks.diffusion --out benchmarks/diffusion_results.md

# optimum-intel (a contender of benchmarks/generate.py) pins another transformers: its own venv.
# Its torchvision is a CUDA build that cannot load beside CPU torch, and transformers then fails to
# import, so it is removed.
OPT_VENV := .venv-optimum
$(OPT_VENV)/.installed: benchmarks/constraints-torch.txt
	test -x $(OPT_VENV)/bin/python || $(PY) -m venv $(OPT_VENV)
	$(OPT_VENV)/bin/python -m pip install -q torch==2.13.0
	$(OPT_VENV)/bin/python -m pip install -q "optimum-intel[openvino]==2.2.0" -c benchmarks/constraints-torch.txt
	$(OPT_VENV)/bin/python -m pip uninstall -y -q torchvision
	touch $@

venv-optimum: $(OPT_VENV)/.installed

bench-generate: $(STAMP) $(OPT_VENV)/.installed
	$(VENV)/bin/python -m benchmarks.generate --out benchmarks/generate_results.md

bench-quantization: $(STAMP)
	$(VENV)/bin/python -m benchmarks.quantization --out benchmarks/quantization_results.md

# TorchServe's frontend is Java: its serving tests need a JRE (Debian's, if none is installed).
java:
	command -v java >/dev/null || (apt-get update -q && apt-get install -y -q --no-install-recommends openjdk-17-jre-headless)

# The full serving end-to-end tests (ResNet-50, BERT-base, Inductor; the default run has short ones)
# and the serving benchmark (TorchServe: fxvino vs eager vs Inductor; Ray Serve: 1 vs 2 replicas).
test-serving: $(STAMP) java
	FXVINO_SERVING=full $(VENV)/bin/python -m pytest -q -s -p no:warnings tests/serving

bench-serving: $(STAMP) java
	$(VENV)/bin/python -m benchmarks.serving

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) $(OPT_VENV) build docs/_build src/*.egg-info .pytest_cache .ruff_cache
