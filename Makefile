# Thin wrapper over CMake. `make run` and `make test` set up everything themselves.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc)
FUZZ_SECONDS ?= 20
CONFIG     ?= examples/sip.yaml
PY         := /usr/bin/python3

.PHONY: all deps build run test test-unit test-asan fuzz bench docs clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

examples/models/tiny/1/model.onnx: examples/make_tiny_model.py
	@$(PY) examples/make_tiny_model.py examples/models/tiny/1/model.onnx

run: build examples/models/tiny/1/model.onnx
	$(BUILD)/sipd --config $(CONFIG)

test: build
	@cd $(BUILD) && ctest --output-on-failure
	@$(MAKE) --no-print-directory fuzz

# Same suite with ASan + UBSan (LeakSanitizer included).
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSIP_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) -- --no-print-directory
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure

# Every parser's libFuzzer target, for a bounded time each.
fuzz: deps
	@CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSIP_FUZZ=ON -DSIP_SANITIZE=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$$//' | tr '\n' ' ') -- --no-print-directory
	@for f in $(FUZZ_BUILD)/fuzz/fuzz_*; do \
	  name=$$(basename $$f); mkdir -p $(FUZZ_BUILD)/corpus/$$name; \
	  echo "fuzz: $$name for $(FUZZ_SECONDS)s"; \
	  seeds=; [ -d tests/fuzz/corpus/$$name ] && seeds=tests/fuzz/corpus/$$name; \
	  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  $$f -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 -print_final_stats=0 -artifact_prefix=$(FUZZ_BUILD)/ \
	    $(FUZZ_BUILD)/corpus/$$name $$seeds 2>$(FUZZ_BUILD)/$$name.log \
	    || { tail -50 $(FUZZ_BUILD)/$$name.log; exit 1; }; \
	done

# Generated reference docs: docs/config.md from the config parser's tables.
docs: build
	@$(BUILD)/docs/config_doc > docs/config.md.tmp && mv docs/config.md.tmp docs/config.md
	@echo "docs: wrote docs/config.md"

# Every benchmark in bench/, each run to its end whatever another one found;
# then one table of every figure: target, measured, pass/fail/unstable.
# Fails only when a benchmark stopped with an error.
BENCH_RESULTS ?= $(BUILD)/bench-results.jsonl
bench: build
	@rm -f $(BENCH_RESULTS); crashed=; \
	for b in bench/*.py; do \
	  [ $$b = bench/common.py ] && continue; echo "== $$b"; \
	  SIP_BENCH_RESULTS=$(abspath $(BENCH_RESULTS)) $(PY) $$b $(BUILD) || crashed="$$crashed $$b"; \
	done; \
	$(PY) bench/common.py --table $(BENCH_RESULTS) $$crashed

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
