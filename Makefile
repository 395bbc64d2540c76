# SPDX-License-Identifier: Apache-2.0
# imexguard: plain Makefile (the layout of fzy and vis: flat src/, one file per concern).
PREFIX   ?= /usr/local
DESTDIR  ?=
CC       ?= cc
PKG      := lua5.4 libsystemd expat
B        := build

CFLAGS   ?= -O2 -g
WARN     := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
PKGCFLAGS = $(shell pkg-config --cflags $(PKG) 2>/dev/null)
PKGLIBS   = $(shell pkg-config --libs $(PKG) 2>/dev/null)
# -MD -MP: each object also writes its header dependencies (build/.../x.d, included below).
ALL_CFLAGS = $(WARN) $(PKGCFLAGS) -Isrc -MD -MP $(CFLAGS)
LDLIBS_HOST = $(PKGLIBS) -llua5.4-cjson -lm
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

# Primitives: every src/*.c except the binary's own files; they also build the Lua C module.
BIN_ONLY := src/main.c src/cli.c src/driver.c src/sandbox.c src/trust.c src/watchdog.c
PRIM_SRC := $(filter-out $(BIN_ONLY),$(wildcard src/*.c))
LUA_LIB  := $(wildcard lua/imexguard/*.lua lua/imexguard/*/*.lua)
POLICIES := $(filter-out %_spec.lua,$(wildcard policies/*.lua))
SIM_SRC  := $(wildcard contrib/imexsim/*.c)

BIN      := $(B)/imexguard
MODULE   := $(B)/lua/imexguard/host.so
SIM      := $(B)/imexsim
ASAN_BIN := $(B)/asan/imexguard
ASAN_MOD := $(B)/asan/lua/imexguard/host.so

# The build packages (pkg-config, lua5.4 and the -dev packages of Lua 5.4, libsystemd and libexpat): a plain
# `make` without them says which command installs them instead of failing on a missing header.
HAVE_DEPS := $(shell pkg-config --exists $(PKG) 2>/dev/null && command -v lua5.4 >/dev/null && \
	test -e "$$($(CC) -print-file-name=liblua5.4-cjson.so)" && echo yes)

.PHONY: all check test lint lint-c format demo bench e2e slurm24 slurm26 install uninstall clean deps sanitize \
	need-deps
all: $(BIN) $(MODULE) $(SIM)

need-deps:
ifeq ($(HAVE_DEPS),)
	@echo "imexguard: the build needs pkg-config, lua5.4, liblua5.4-dev, lua-cjson-dev," \
	      "libsystemd-dev and libexpat1-dev; install them with 'make deps' (runs contrib/deps.sh), then run make again" >&2
	@exit 1
endif

# The C files generated from the Lua library (src/embed.lua): the precompiled library and policies
# (the binary's), and the facts C takes from commands.lua, outcomes.lua, settings.lua and
# progress.lua (src/generated.h; the binary's and the module's).
FACTS    := lua/imexguard/commands.lua lua/imexguard/outcomes.lua lua/imexguard/settings.lua \
            lua/imexguard/progress.lua
$(B)/embedded.c: src/embed.lua $(LUA_LIB) $(POLICIES) | need-deps
	@mkdir -p $(@D)
	lua5.4 src/embed.lua chunks $@ $(LUA_LIB) $(POLICIES)
$(B)/generated.c: src/embed.lua $(FACTS) | need-deps
	@mkdir -p $(@D)
	lua5.4 src/embed.lua facts $@

# One pattern rule per build variant: plain objects (the binary), PIC objects (the Lua C module
# for busted), ASan + UBSan objects (binary and module, used by `make check`).
$(B)/obj/%.o: src/%.c | need-deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<
$(B)/pic/%.o: src/%.c | need-deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fPIC -c -o $@ $<
$(B)/asan/obj/%.o: src/%.c | need-deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(SAN) -fPIC -O1 -c -o $@ $<
# The generated sources: long string literals.
$(B)/obj/%.o: $(B)/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Wno-overlength-strings -c -o $@ $<
$(B)/pic/%.o: $(B)/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Wno-overlength-strings -fPIC -c -o $@ $<
$(B)/asan/obj/%.o: $(B)/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(SAN) -Wno-overlength-strings -fPIC -O1 -c -o $@ $<

$(BIN): $(patsubst src/%.c,$(B)/obj/%.o,$(PRIM_SRC) $(BIN_ONLY)) $(B)/obj/generated.o \
	$(B)/obj/embedded.o
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HOST)
$(MODULE): $(patsubst src/%.c,$(B)/pic/%.o,$(PRIM_SRC)) $(B)/pic/generated.o
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -o $@ $^ -lsystemd -lexpat -lm
$(ASAN_BIN): $(patsubst src/%.c,$(B)/asan/obj/%.o,$(PRIM_SRC) $(BIN_ONLY)) \
	$(B)/asan/obj/generated.o $(B)/asan/obj/embedded.o
	$(CC) $(SAN) $(LDFLAGS) -o $@ $^ $(LDLIBS_HOST)
$(ASAN_MOD): $(patsubst src/%.c,$(B)/asan/obj/%.o,$(PRIM_SRC)) $(B)/asan/obj/generated.o
	@mkdir -p $(@D)
	$(CC) $(SAN) -shared -o $@ $^ -lsystemd -lexpat -lm
sanitize: $(ASAN_BIN) $(ASAN_MOD) $(SIM)
	ln -sf ../imexsim $(B)/asan/imexsim
	ln -sf ../nvidia-imex $(B)/asan/nvidia-imex
	ln -sf ../nvidia-imex-ctl $(B)/asan/nvidia-imex-ctl

-include $(wildcard $(B)/obj/*.d $(B)/pic/*.d $(B)/asan/obj/*.d)

# The IMEX simulator (test and demo infrastructure): one binary, called as nvidia-imex or
# nvidia-imex-ctl through symlinks.
$(SIM): $(SIM_SRC) $(wildcard contrib/imexsim/*.h)
	@mkdir -p $(@D)
	$(CC) $(WARN) -Icontrib/imexsim $(CFLAGS) -o $@ $(SIM_SRC) -lm
	ln -sf imexsim $(B)/nvidia-imex
	ln -sf imexsim $(B)/nvidia-imex-ctl

# Debian packages by purpose (contrib/deps.sh): `make deps` is deps-build, safe on a compute node
# (never Slurm or munge); deps-run: the runtime libraries of a node that gets the binary copied;
# deps-pkg: build + debhelper, lintian, mandoc (`make deb`);
# deps-test: what `make check` needs (installs Slurm and munge with their services left disabled).
.PHONY: deps-build deps-run deps-demo deps-pkg deps-test man deb completion
deps: deps-build
deps-build:
	@contrib/deps.sh build
deps-run:
	@contrib/deps.sh run
deps-demo:
	@contrib/deps.sh demo
deps-pkg:
	@contrib/deps.sh pkg
deps-test:
	@contrib/deps.sh test

lint: lint-c
	luacheck -q lua policies tests contrib bench man src/embed.lua
	lua5.4 tests/lint/shape.lua

lint-c:
	clang-format --dry-run -Werror src/*.c src/*.h contrib/imexsim/*.c $(wildcard contrib/imexsim/*.h)

format:
	clang-format -i src/*.c src/*.h contrib/imexsim/*.c $(wildcard contrib/imexsim/*.h)

# The test command of the README: installs what is missing, builds, runs every tier, and ends
# with the line "N passed, N failed".
check: deps-test
	@$(MAKE) --no-print-directory all sanitize
	@tests/run

test: check

e2e: deps-test
	@$(MAKE) --no-print-directory all
	@tests/run e2e

# The end-to-end specs under Debian 13's Slurm 24.11 (tests/slurm24; the first run makes the root).
slurm24: deps-test
	@$(MAKE) --no-print-directory all
	@tests/run slurm24

# The same and Slurm 26.05's features under Debian testing's Slurm 26.05 (tests/slurm26; the first
# run makes the root).
slurm26: deps-test
	@$(MAKE) --no-print-directory all
	@tests/run slurm26

# The demo (contrib/demo.sh): NODES=N simulated nodes; KEEP=1 leaves the rack up in the background
# (contrib/demo/node runs a command on one node; `kill PID`, as printed, stops it).
demo: deps-demo
	@$(MAKE) --no-print-directory all
	@contrib/demo.sh $(if $(NODES),--nodes=$(NODES)) $(if $(KEEP),--keep)

# The bench uses the build of this make (B), unless IMEXGUARD_BUILD names another; bench/README.md.
bench: deps-demo
	@$(MAKE) --no-print-directory all
	@IMEXGUARD_BUILD="$${IMEXGUARD_BUILD:-$(B)}" bench/run

# Man pages: scdoc sources in man/, with the commands, settings and outcomes sections generated
# from lua/imexguard/commands.lua, settings.lua and outcomes.lua (man/gen.lua).
MANPAGES := $(B)/man/imexguard.8 $(B)/man/imexguard.conf.5
man: $(MANPAGES)
$(B)/man/%: man/%.scd.in man/gen.lua man/tidy.lua $(FACTS)
	@mkdir -p $(B)/man-src $(@D)
	lua5.4 man/gen.lua $< $(B)/man-src/$(@F).scd
	scdoc < $(B)/man-src/$(@F).scd | lua5.4 man/tidy.lua > $@

# The bash completion: generated from commands.lua, settings.lua and the options of the built
# binary's usage text (contrib/completion/gen.lua).
COMPLETION := $(B)/completion/imexguard
completion: $(COMPLETION)
$(COMPLETION): contrib/completion/gen.lua contrib/completion/imexguard.bash.in $(FACTS) $(BIN)
	@mkdir -p $(@D)
	$(BIN) --help | lua5.4 contrib/completion/gen.lua contrib/completion/imexguard.bash.in $@

# The version: one place, IG_VERSION in src/imexguard.h (what `imexguard version` prints).
VERSION = $(shell sed -n 's/^\#define IG_VERSION "\(.*\)"/\1/p' src/imexguard.h)

# Where make install puts things (the Debian package: PREFIX=/usr): the Slurm wrappers (prolog,
# epilog, HealthCheckProgram) in libexec, the LBNL NHC check file, the bash completion, and the
# docs and examples.
LIBEXEC  = $(PREFIX)/libexec/imexguard
DOCDIR   = $(PREFIX)/share/doc/imexguard
COMPDIR  = $(PREFIX)/share/bash-completion/completions
DOCS     := README.md docs/design.md docs/policy-api.md docs/json.md
EXAMPLES := contrib/imexguard.conf.example contrib/slurm/slurm.conf.snippet contrib/nhc/nhc.conf \
            contrib/slots/imexguard-slots.conf

install: $(BIN) $(MANPAGES) $(COMPLETION)
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/sbin/imexguard
	install -D -m 0644 contrib/imexguard.conf.example $(DESTDIR)/etc/imexguard/imexguard.conf.example
	for hook in prolog epilog health; do \
		sed 's|/usr/local/|$(PREFIX)/|g' contrib/slurm/$$hook.sh > $(B)/$$hook.sh && \
		install -D -m 0755 $(B)/$$hook.sh $(DESTDIR)$(LIBEXEC)/$$hook.sh || exit 1; \
	done
	install -D -m 0644 $(B)/man/imexguard.8 $(DESTDIR)$(PREFIX)/share/man/man8/imexguard.8
	install -D -m 0644 $(B)/man/imexguard.conf.5 $(DESTDIR)$(PREFIX)/share/man/man5/imexguard.conf.5
	install -d -m 0755 $(DESTDIR)$(PREFIX)/share/imexguard/policies
	install -m 0644 $(POLICIES) $(DESTDIR)$(PREFIX)/share/imexguard/policies/
	sed 's|/usr/sbin/|$(PREFIX)/sbin/|g; s|/usr/share/|$(PREFIX)/share/|g' contrib/nhc/imexguard.nhc > $(B)/imexguard.nhc
	install -D -m 0644 $(B)/imexguard.nhc $(DESTDIR)$(PREFIX)/share/imexguard/nhc/imexguard.nhc
	install -D -m 0644 $(COMPLETION) $(DESTDIR)$(COMPDIR)/imexguard
	install -d -m 0755 $(DESTDIR)$(DOCDIR)/examples
	install -m 0644 $(DOCS) $(DESTDIR)$(DOCDIR)/
	install -m 0644 $(EXAMPLES) $(DESTDIR)$(DOCDIR)/examples/

# What install wrote, then the folders that are imexguard's own once empty (/etc/imexguard keeps
# an admin's imexguard.conf); shared folders (man, completions, doc, sbin) stay.
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/sbin/imexguard $(DESTDIR)$(LIBEXEC)/prolog.sh \
	      $(DESTDIR)$(LIBEXEC)/epilog.sh $(DESTDIR)$(LIBEXEC)/health.sh \
	      $(DESTDIR)/etc/imexguard/imexguard.conf.example \
	      $(DESTDIR)$(PREFIX)/share/man/man8/imexguard.8 \
	      $(DESTDIR)$(PREFIX)/share/man/man5/imexguard.conf.5 \
	      $(patsubst policies/%,$(DESTDIR)$(PREFIX)/share/imexguard/policies/%,$(POLICIES)) \
	      $(DESTDIR)$(PREFIX)/share/imexguard/nhc/imexguard.nhc $(DESTDIR)$(COMPDIR)/imexguard \
	      $(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(DOCS))) \
	      $(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(notdir $(EXAMPLES)))
	-rmdir $(DESTDIR)$(LIBEXEC) $(DESTDIR)$(PREFIX)/share/imexguard/policies \
	       $(DESTDIR)$(PREFIX)/share/imexguard/nhc $(DESTDIR)$(PREFIX)/share/imexguard \
	       $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) $(DESTDIR)/etc/imexguard 2>/dev/null

# The Debian package imexguard_VERSION_ARCH.deb in $(B)/deb/, built with debhelper from a copy of
# the committed and working-tree sources in $(B)/deb/src (the work tree stays clean).
# debian/changelog is written there from VERSION.
deb: deps-pkg
	rm -rf $(B)/deb && mkdir -p $(B)/deb/src
	tar -c --exclude=./$(B) --exclude=./.git . | tar -x -C $(B)/deb/src
	sed 's/@VERSION@/$(VERSION)/; s/@DATE@/$(shell date -R -d @$$(git log -1 --format=%ct 2>/dev/null || date +%s))/' \
		debian/changelog.in > $(B)/deb/src/debian/changelog
	cd $(B)/deb/src && dpkg-buildpackage -b -us -uc --no-pre-clean > ../build.log 2>&1 || \
		{ tail -n 40 ../build.log; exit 1; }
	@ls $(B)/deb/imexguard_$(VERSION)_*.deb
clean:
	rm -rf $(B)

# The soak tier's long form (tests/soak): kill -9 of the prolog, torn reads, lock overlap, fuzzing
# and faults of the environment with the full counts; under 20 minutes on 2 cores. `make check`
# runs its short form (tests/run soak). IMEXGUARD_SOAK_SEED=N replays a run.
.PHONY: soak
soak: deps-test
	@$(MAKE) --no-print-directory all
	@tests/with-systemd lua5.4 tests/soak/run.lua --long
