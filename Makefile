# Thin wrapper over CMake. `make run` and `make test` set up everything themselves.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc)
FUZZ_SECONDS ?= 20
CONFIG     ?= examples/sip.yaml
PY         := /usr/bin/python3

.PHONY: all deps build run test test-unit test-asan fuzz bench docs clean install install-only deb deb-only image

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
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSIP_FUZZ=ON -DSIP_SANITIZE=ON >/dev/null
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

# Installs sipd, sip, libsip, libsipclient, headers, .pc files and ONNX Runtime
# (lib/sip/) into $(DESTDIR)$(PREFIX), and the Python client into PYTHONDIR
# (README "Install"). install-only installs what $(BUILD) already holds.
PREFIX ?= /usr/local
PY_VER = $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# /usr: Debian's dist-packages for every Python 3; elsewhere the versioned one
# (/usr/local/lib/python3.X/dist-packages is on Debian's sys.path).
PYTHONDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(PY_VER)/dist-packages)

install: build
	@$(MAKE) --no-print-directory install-only

install-only:
	@test -x $(BUILD)/sipd -a -x $(BUILD)/sip || { echo "install: $(BUILD)/sipd or $(BUILD)/sip is not built;" \
	  "expected a built tree in BUILD (make install builds it)" >&2; exit 1; }
	@DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix $(PREFIX) $(INSTALL_STRIP) >/dev/null
	@# A copy of the sources: the build leaves nothing in clients/python.
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  cp -r clients/python/pyproject.toml clients/python/README.md clients/python/cann_sip "$$tmp"/ && \
	  $(PY) -m pip install -q --root-user-action=ignore --disable-pip-version-check --no-build-isolation \
	    --no-index --no-deps --no-compile --upgrade --target "$(DESTDIR)$(PYTHONDIR)" "$$tmp"
	@echo "install: $(DESTDIR)$(PREFIX) (Python package cann_sip in $(DESTDIR)$(PYTHONDIR))"

# build/sip_<version>_<arch>.deb: the install above with PREFIX=/usr, stripped,
# Depends from dpkg-shlibdeps. DEB_COMPRESS: xz level 1 packs in about a second.
DEB_DIR ?= $(BUILD)/deb
DEB_COMPRESS ?= -Zxz -z1
DEB_MAINTAINER ?= sip maintainers <maintainers@localhost>

deb: build
	@$(MAKE) --no-print-directory deb-only

deb-only:
	@rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/debian/sip/DEBIAN
	@$(MAKE) --no-print-directory install-only PREFIX=/usr DESTDIR=$(abspath $(DEB_DIR))/debian/sip \
	  INSTALL_STRIP=--strip >/dev/null
	@cp LICENSE $(DEB_DIR)/debian/sip/usr/share/doc/sip/copyright
	@# dpkg keeps an edited sip.yaml on upgrade (sipd.service reads it; docs/deploy.md).
	@printf '/etc/sip/sip.yaml\n' > $(DEB_DIR)/debian/sip/DEBIAN/conffiles
	@cd $(DEB_DIR) && printf 'Source: sip\n\nPackage: sip\nArchitecture: any\n' > debian/control && \
	  dpkg-shlibdeps -O --ignore-missing-info -ldebian/sip/usr/lib -ldebian/sip/usr/lib/sip \
	    debian/sip/usr/bin/sipd debian/sip/usr/bin/sip debian/sip/usr/lib/lib*.so.*.*.* \
	    debian/sip/usr/lib/sip/libonnxruntime.so.1 >shlibs.txt 2>shlibdeps.log || \
	  { echo "deb: dpkg-shlibdeps could not list the runtime libraries (expected every one" \
	    "to belong to an installed Debian package):" >&2; cat shlibdeps.log >&2; exit 1; }
	@cd $(DEB_DIR) && version=$$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' $(abspath $(BUILD))/CMakeCache.txt) && \
	  arch=$$(dpkg --print-architecture) && \
	  sed -e "s|@VERSION@|$$version|" -e "s|@ARCH@|$$arch|" -e "s|@MAINTAINER@|$(DEB_MAINTAINER)|" \
	    -e "s|@DEPENDS@|$$(sed -n 's/^shlibs:Depends=//p' shlibs.txt)|" \
	    -e "s|@SIZE@|$$(du -sk --exclude=DEBIAN debian/sip | cut -f1)|" \
	    $(CURDIR)/cmake/deb-control.in > debian/sip/DEBIAN/control && \
	  dpkg-deb --root-owner-group $(DEB_COMPRESS) --build debian/sip $(abspath $(BUILD))/sip_$${version}_$$arch.deb >/dev/null && \
	  echo "deb: $(BUILD)/sip_$${version}_$$arch.deb"

# The container image from Containerfile (docs/deploy.md): buildah or podman.
# IMAGE_BASE=debian builds the Debian 12 bases from Debian's packages
# (mmdebstrap) where no container registry is reachable.
IMAGE      ?= localhost/sip:latest
IMAGE_BASE ?= registry
IMAGE_JOBS ?= 2
image: deps
	@IMAGE=$(IMAGE) IMAGE_BASE=$(IMAGE_BASE) IMAGE_JOBS=$(IMAGE_JOBS) packaging/image.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
