# catenc developer entry points.
#
#   make demo    compile every sample with --test, then build and run samples/c
#   make test    run the test suite on every core (TEST_JOBS=N: N workers) and list its 20 slowest tests
#   make coverage  regenerate docs/coverage/{clang,opencl}.md, and cuda.md where there is a GPU
#   make onnx-node-report  regenerate docs/coverage/onnx-node.md (the ONNX node tests, clang)
#   make gpu-check on a machine with an NVIDIA GPU: every sample with --test, the full cuda
#                test-runtime, GPT-2 and the GPU bench against PyTorch (bench/gpu.py; installs nothing)
#   make lint    ruff check + ruff format --check
#   make gpt2    GPT-2 small in C (samples/gpt2): compile it, write random weights, generate 32 tokens
#   make bench   catenc against numpy and PyTorch (bench/run.py; installs the bench extra; writes
#                bench/results.md; BENCH_ARGS="--quick" for a smoke run, "--only sgemm --runs 20")
#   make bench-tune  catenc tune every bench composite on this machine (bench/tuning/; TUNE_ARGS)
#   make samples-tune  the same for the samples and GPT-2 (samples/*.tuning.json)
#   make clean   remove build outputs (keeps .venv; `make distclean` removes it too)
#
# Works on a fresh Debian 12 machine with only python3, gcc and make: `setup` runs
# `system-packages`, which probes for each tool the tests use and apt-get installs only what a
# probe finds missing (g++; clang; libomp-dev, when clang cannot link OpenMP; libclang-rt-N-dev,
# when clang cannot link -fsanitize=address,undefined or lacks its shared UBSan runtime;
# libgcc-N-dev, when gcc cannot link its sanitizers; pocl-opencl-icd, OpenCL on the CPU;
# python3-venv), then creates .venv and installs catenc into it (editable, with the dev
# extra). It runs once (stamp file) and again only when pyproject.toml changes.

PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.setup-stamp
CATENC := $(VENV)/bin/catenc
PYBIN  := $(VENV)/bin/python
RUFF   := $(VENV)/bin/ruff

# apt-get as root directly; otherwise through sudo where there is one.
SUDO := $(shell if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then echo sudo; fi)

# Samples and the sizes `make demo` tests each one at (symbol=value,...).
SAMPLES         := gemm mlp softmax layernorm attention conv2d
SIZES_gemm      := M=100,N=64,K=37
SIZES_mlp       := B=8,D=48
SIZES_softmax   := N=33,D=100
SIZES_layernorm := N=33,D=100
SIZES_attention := T=45,D=64
SIZES_conv2d    := N=2,C=3,H=13,W=11,K=8
# The sizes `make samples-tune` tunes each sample at (typical layer sizes, not the test's).
TUNE_gemm       := M=1024,N=1024,K=1024
TUNE_mlp        := B=256,D=768
TUNE_softmax    := N=4096,D=1024
TUNE_layernorm  := N=4096,D=1024
TUNE_attention  := T=256,D=64
TUNE_conv2d     := N=8,C=64,H=56,W=56,K=64

LINT_DIRS := catenc tests runtimes samples bench

.PHONY: setup system-packages demo test fuzz coverage onnx-node-report gpu-check lint bench bench-tune bench-deps samples-tune gpt2 clean distclean $(addprefix sample-,$(SAMPLES))

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(MAKE) --no-print-directory system-packages
	@set -e; echo "==> $(PYTHON) -m venv $(VENV)"; \
	if ! $(PYTHON) -m venv $(VENV); then rm -rf $(VENV); exit 1; fi
	$(VENV)/bin/pip install -e '.[dev]'
	@touch $@

# Each probe links what the tests link (a shared OpenMP library, a sanitized executable), so a
# half-installed toolchain counts as missing. clang comes first: the clang probes need it.
CLANG_MAJOR = $$(clang -dumpversion | cut -d. -f1)
GCC_MAJOR   = $$(gcc -dumpversion | cut -d. -f1)
PROBE_C     = printf 'int main(void){return 0;}\n' >$$tmp/p.c
system-packages:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; $(PROBE_C); \
	printf '#include <omp.h>\nint f(void){return omp_get_max_threads();}\n' >$$tmp/omp.c; \
	apt_install() { \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "error: no apt-get here; please install: $$*" >&2; exit 1; fi; \
	  if [ "$$(id -u)" != 0 ] && [ -z "$(SUDO)" ]; then \
	    echo "error: not root and no sudo; please install: $$*" >&2; exit 1; fi; \
	  echo "==> apt-get install $$*"; \
	  [ -n "$$updated" ] || $(SUDO) apt-get update; updated=1; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$*; \
	}; \
	sanitized() { $$1 -fsanitize=address,undefined $$tmp/p.c -o $$tmp/p >/dev/null 2>&1; }; \
	updated=; want=; \
	command -v clang >/dev/null 2>&1 || apt_install clang; \
	command -v g++ >/dev/null 2>&1 || want="$$want g++"; \
	clang -fopenmp -fPIC -shared $$tmp/omp.c -o $$tmp/omp.so >/dev/null 2>&1 || want="$$want libomp-dev"; \
	if ! sanitized clang || [ ! -f "$$(clang -print-file-name=libclang_rt.ubsan_standalone-x86_64.so)" ]; then \
	  want="$$want libclang-rt-$(CLANG_MAJOR)-dev"; fi; \
	sanitized gcc || want="$$want libgcc-$(GCC_MAJOR)-dev"; \
	[ -e /etc/OpenCL/vendors/pocl.icd ] || want="$$want pocl-opencl-icd"; \
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || want="$$want python3-venv"; \
	if [ -n "$$want" ]; then apt_install $$want; fi; \
	for probe in "clang -fopenmp -fPIC -shared $$tmp/omp.c -o $$tmp/omp.so" "sanitized clang" "sanitized gcc"; do \
	  $$probe >/dev/null 2>&1 || { echo "error: still failing after setup: $$probe" >&2; exit 1; }; done

# What every catenc build comes from besides its own file: catenc itself (its sources and
# templates), the op library and the bundled runtimes. Builds are recorded by stamp files that
# are touched only after a successful run, so a second `make demo` or `make gpt2` with nothing
# changed compiles nothing, whatever catenc does with the mtimes of outputs it did not change.
CATENC_DEPS := $(STAMP) $(sort $(shell find catenc ops runtimes -type f ! -path '*/__pycache__/*' 2>/dev/null))
sample_file = $(firstword $(wildcard samples/$(1).toml samples/$(1).yaml))
# A sample's tuning file, where one is committed (`make samples-tune` writes them): compile --tuning
# applies its entries for this machine and toolchain; other machines keep the heuristics.
sample_tuning = $(wildcard samples/$(1).tuning.json)

demo: $(SAMPLES:%=build/samples/%.tested)
	$(MAKE) --no-print-directory -C samples/c CATENC=$(abspath $(CATENC))
	@echo
	@echo "==> built:"
	@for d in build/samples/*/ samples/c/build/; do \
	  [ -d "$$d" ] || continue; echo "  $$d"; \
	  for f in "$$d"*; do [ -f "$$f" ] && printf '    %-40s %8s bytes\n' "$$(basename "$$f")" "$$(wc -c < "$$f")"; done; \
	done; true

# Samples are found by stem: samples/<stem>.toml or samples/<stem>.yaml. build/samples/<stem>.tested:
# build/samples/<stem>/ is up to date and passed its --test.
$(foreach s,$(SAMPLES),$(eval build/samples/$(s).tested: $(call sample_file,$(s)) $(call sample_tuning,$(s)) $$(CATENC_DEPS)))
build/samples/%.tested:
	$(CATENC) compile $(call sample_file,$*) -o build/samples/$* --test "$(SIZES_$*)" \
	  $(addprefix --tuning ,$(call sample_tuning,$*))
	@touch $@

# Tune every sample (and GPT-2) on this machine, adding its entries to samples/*.tuning.json.
samples-tune: $(STAMP)
	$(foreach s,$(SAMPLES),$(CATENC) tune $(call sample_file,$(s)) --sizes "$(TUNE_$(s))" \
	  -o samples/$(s).tuning.json $(TUNE_ARGS) && ) true
	$(CATENC) tune samples/gpt2/gpt2.toml --composite gpt2 --composite gpt2_step --sizes "T=256" \
	  --sizes "S=256" -o samples/gpt2/gpt2.tuning.json $(TUNE_ARGS)

$(addprefix sample-,$(SAMPLES)): sample-%: build/samples/%.tested

# The suite on TEST_JOBS workers (pytest-xdist; `auto`: one per core, 0: in this process alone), each
# test file whole on one worker (its module fixtures build once), handed out in the order the files
# are collected (tests/conftest.py puts some first: FIRST), then the 20 slowest tests.
TEST_JOBS ?= auto
PYTEST := $(PYBIN) -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder --durations=20

test: $(STAMP)
	$(PYTEST) tests

# GPT-2 small (samples/gpt2): compile the composite to build/gpt2, write deterministic random
# weights there once (samples/gpt2/README.md: real ones; an existing file is never replaced), build
# samples/gpt2/main.c against libgpt2.so (rpath $ORIGIN: it runs without LD_LIBRARY_PATH) and
# generate 32 tokens greedily, printing the prefill time and the decoding speed. GPT2_ARGS for
# more, e.g. "-n 64 -p '464 2068'". The compile and link steps run only when their inputs changed;
# the generation runs every time (it is what `make gpt2` is for).
GPT2 := build/gpt2

gpt2: $(GPT2)/gpt2 | $(GPT2)/weights.safetensors
	$(GPT2)/gpt2 $(GPT2)/weights.safetensors -n 32 $(GPT2_ARGS)

build/gpt2.compiled: samples/gpt2/gpt2.toml $(wildcard samples/gpt2/gpt2.tuning.json) $(CATENC_DEPS)
	$(CATENC) compile samples/gpt2/gpt2.toml -o $(GPT2) $(addprefix --tuning ,$(wildcard samples/gpt2/gpt2.tuning.json))
	@touch $@

$(GPT2)/gpt2: samples/gpt2/main.c build/gpt2.compiled
	$(CC) -std=c99 -Wall -Wextra -O2 -I$(GPT2) samples/gpt2/main.c -o $@ \
	  -L$(GPT2) -lgpt2 -lm -Wl,-rpath,'$$ORIGIN'

$(GPT2)/weights.safetensors: | $(STAMP)
	@mkdir -p $(GPT2)
	$(PYBIN) samples/gpt2/weights.py $@.tmp
	mv $@.tmp $@

# Differential fuzzing (tests/fuzzing/run.py) for MINUTES (default 10) from SEED (default 1);
# failing programs are written to build/fuzz/failures/.
fuzz: $(STAMP)
	$(PYBIN) -m tests.fuzzing.run --minutes $(or $(MINUTES),10) --seed $(or $(SEED),1)

# The op-coverage reports (committed; the README links them). The committed cuda report is
# gpu-check's, every cell run on a GPU; here its cells are only `compiled` where there is none, so
# that one goes to build/coverage.
coverage: $(STAMP)
	$(CATENC) test-runtime --runtime clang -o docs/coverage/clang.md --json build/coverage/clang.json
	$(CATENC) test-runtime --runtime opencl -o docs/coverage/opencl.md --json build/coverage/opencl.json
	$(CATENC) test-runtime --runtime cuda -o $$($(PYBIN) -c "from catenc.runtime.device_host import cuda_available; \
	  print('docs' if cuda_available() else 'build')")/coverage/cuda.md --json build/coverage/cuda.json

# The ONNX node-test report (committed; docs/cli.md links it). Its fail and error rows are the
# report's content, so their exit code 3 still leaves a written report and a successful make.
onnx-node-report: $(STAMP)
	$(CATENC) test-runtime --suite onnx --freeze-shape-inputs --runtime clang -o docs/coverage/onnx-node.md \
	  --json build/coverage/onnx-node.json || [ $$? -eq 3 ]

# On a machine with an NVIDIA GPU: bench/gpu.py runs every sample with --test on the GPU, the whole
# op library (docs/coverage/cuda.md, every cell run), GPT-2 small against the C build and PyTorch,
# and the GPU bench against PyTorch (bench/gpu_results.md). It installs nothing: GPU_PYTHON is a
# python3 with PyTorch (CUDA), numpy, click, jinja2 and PyYAML, such as a GPU machine's image has,
# and catenc runs from this tree (PYTHONPATH). GPU_ARGS="--skip coverage" leaves a part out.
GPU_PYTHON ?= $(shell if [ -x $(PYBIN) ] && $(PYBIN) -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then echo $(PYBIN); else echo python3; fi)

gpu-check:
	@$(GPU_PYTHON) -c "import torch, click, jinja2, yaml, numpy; assert torch.cuda.is_available()" 2>/dev/null || \
	  { echo "error: make gpu-check needs an NVIDIA GPU and a python3 with PyTorch (CUDA), numpy, click, jinja2, PyYAML (GPU_PYTHON=...)" >&2; exit 1; }
	@command -v nvcc >/dev/null || { echo "error: make gpu-check needs nvcc (the CUDA toolkit) on PATH" >&2; exit 1; }
	PYTHONPATH=$(CURDIR) $(GPU_PYTHON) bench/gpu.py $(GPU_ARGS)

lint: $(STAMP)
	$(RUFF) check $(LINT_DIRS)
	$(RUFF) format --check $(LINT_DIRS)

clean:
	rm -rf build samples/c/build Reports.md .pytest_cache .ruff_cache *.egg-info
	find . \( -path ./$(VENV) -o -path ./.git \) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)

# The benchmark suite: installs the bench extra (torch 2.13.0 CPU, threadpoolctl, onnx, onnxruntime) when
# one is missing, then runs bench/run.py (about 5 minutes at most; options in BENCH_ARGS).
bench: bench-deps
	$(PYBIN) bench/run.py $(BENCH_ARGS)

# Tune every bench composite on this machine (catenc tune, TUNE_ARGS="--budget 40s --only softmax"):
# writes bench/tuning/*.tuning.json, which `make bench` times as its `tuned` rows.
bench-tune: bench-deps
	$(PYBIN) bench/tune.py $(TUNE_ARGS)

bench-deps: $(STAMP)
	@if ! $(PYBIN) -c 'import sys, threadpoolctl, torch, onnx, onnxruntime; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then \
	  echo "==> $(VENV)/bin/pip install -e '.[bench]'"; \
	  $(VENV)/bin/pip install -e '.[bench]'; \
	fi
