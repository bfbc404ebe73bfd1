# SPDX-License-Identifier: Apache-2.0
# The two commands of the README: `make demo` and `make test`. Both install what they need.

SHELL := /bin/bash
JOBS ?= $(shell nproc)
RELEASE := build/release
ASAN := build/asan
FUZZ := build/fuzz
FUZZ_SECONDS ?= 20
CMAKE_COMMON := -DTUTTI_WERROR=ON

.PHONY: all deps build demo test test-release test-asan test-python fuzz style clean test-remote-asan \
	wheel test-wheel

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(RELEASE) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_COMMON) >/dev/null
	cmake --build $(RELEASE) -j$(JOBS)

# The main job: store a shared-prefix workload in ./tutti-store, retrieve, verify, compare.
demo: build
	./$(RELEASE)/tutti demo

test-release: build
	ctest --test-dir $(RELEASE) --output-on-failure -j$(JOBS)

# Every test again under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: deps
	cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DTUTTI_SANITIZE=address,undefined \
		$(CMAKE_COMMON) >/dev/null
	cmake --build $(ASAN) -j$(JOBS)
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		ctest --test-dir $(ASAN) --output-on-failure -j$(JOBS)

# Every on-disk decoder under libFuzzer (clang, ASan+UBSan), for a bounded time, from seeds that
# are valid encodings.
fuzz: deps
	CC=clang cmake -S . -B $(FUZZ) -DTUTTI_FUZZ=ON -DTUTTI_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build $(FUZZ) -j$(JOBS) --target fuzz_superblock fuzz_slot_header gen_seeds
	rm -rf $(FUZZ)/corpus && ./$(FUZZ)/tests/fuzz/gen_seeds $(FUZZ)/corpus
	for t in superblock slot_header; do \
		./$(FUZZ)/tests/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
			-artifact_prefix=$(FUZZ)/ $(FUZZ)/corpus/$$t 2>&1 | \
			grep -E 'ERROR|SUMMARY|number_of_executed_units' ; \
		test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	done

# The Python binding and the vLLM connector, against real vLLM (its CPU build, pinned), in a
# virtual environment of their own; the package from the source tree, the library from
# $(RELEASE). The end-to-end test, the longest, runs once: from the installed wheel (test-wheel).
VENV := .venv-vllm
SOURCE_PACKAGE := PYTHONPATH=$(CURDIR)/python
test-python: build
	bash scripts/setup-vllm-venv.sh $(VENV)
	cd python && $(SOURCE_PACKAGE) ../$(VENV)/bin/python -m pytest -q tests \
		--ignore=tests/vllm/test_e2e.py

# The Python wheel (tutti-kv): scikit-build-core on this CMake build, CUDA as TUTTI_CUDA says
# (AUTO: when nvcc is found). Built by pip in a small environment of its own.
WHEEL_DIR := build/dist
WHEEL_ENV := build/wheel-env
wheel: deps
	test -x $(WHEEL_ENV)/bin/pip || python3 -m venv $(WHEEL_ENV)
	rm -f $(WHEEL_DIR)/tutti_kv-*.whl
	$(WHEEL_ENV)/bin/pip wheel -q --no-deps -w $(WHEEL_DIR) .

# The wheel installed into a fresh environment outside the source tree: the vLLM end-to-end
# test, tutti demo and C programs from that install (scripts/test-wheel.sh).
test-wheel: wheel
	bash scripts/setup-vllm-venv.sh $(VENV)
	bash scripts/test-wheel.sh $(WHEEL_DIR)/tutti_kv-*.whl $(VENV)

# The remote tier's cluster tests again, on the library built with AddressSanitizer and
# UndefinedBehaviorSanitizer, preloaded into Python (with libstdc++, which Mooncake's client
# throws through).
test-remote-asan: test-asan
	bash scripts/setup-vllm-venv.sh $(VENV)
	cd python && $(SOURCE_PACKAGE) TUTTI_LIBRARY=$(CURDIR)/$(ASAN)/libtutti.so \
		LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so.6)" \
		ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1 \
		../$(VENV)/bin/python -m pytest -q tests/remote/test_cluster.py

# C (clang-format, the rules of HACKING.md) and Python (ruff, mypy: installed with the vLLM
# environment, whose vLLM and torch mypy checks the package against).
style: deps
	bash scripts/setup-vllm-venv.sh $(VENV)
	TUTTI_VENV=$(VENV) bash scripts/check_style.sh

test: style test-release test-asan fuzz test-python test-remote-asan test-wheel

clean:
	rm -rf build
