# SPDX-License-Identifier: Apache-2.0
# The two commands of the README: `make demo` and `make test`. Both install what they need.

JOBS ?= $(shell nproc)
RELEASE := build/release
ASAN := build/asan
CMAKE_COMMON := -DTUTTI_WERROR=ON

.PHONY: all deps build demo test test-release test-asan style clean

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

style: deps
	bash scripts/check_style.sh

test: style test-release test-asan

clean:
	rm -rf build
