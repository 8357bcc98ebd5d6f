# baton: build, test, install. GNU make.

CARGO ?= cargo
CARGOFLAGS ?= --locked
BIN ?= baton

# PREFIX is accepted as well as GNU's prefix (make install PREFIX=/usr).
PREFIX ?= /usr/local
prefix ?= $(PREFIX)
bindir ?= $(prefix)/bin
datarootdir ?= $(prefix)/share
mandir ?= $(datarootdir)/man
man1dir ?= $(mandir)/man1
man7dir ?= $(mandir)/man7
# Where each shell looks for a package's completions. zsh: its
# site-functions directory, which zsh's $fpath has for its own prefix and
# (on Debian too) for /usr/local; Debian packages set
# zshcompdir=/usr/share/zsh/vendor-completions.
bashcompdir ?= $(datarootdir)/bash-completion/completions
zshcompdir ?= $(datarootdir)/zsh/site-functions
fishcompdir ?= $(datarootdir)/fish/vendor_completions.d
# The hook scripts of docs/hooks.md (kept in docs/hooks/, the page shows
# them whole): a Claude Code Stop hook and a loop for agents without hooks.
pkgdatadir ?= $(datarootdir)/baton
HOOKS = baton-stop-hook baton-agent-loop

# The binary install copies: a packager who built it another way (its own
# cargo invocation, a CARGO_TARGET_DIR) names it here and runs
# `make install-only`, which builds nothing.
RELEASE ?= target/release/baton

.PHONY: all build demo test test-busy test-slow bench bench-smoke unicode check distro-check dist install install-only uninstall clean

all: build

build:
	$(CARGO) build --release $(CARGOFLAGS)

# Two agents in temporary directories hand a task over; everything they
# start is stopped and removed at the end.
demo: build
	sh tests/demo.sh $(RELEASE)

# The reliability suite (tests/reliability.rs) needs baton built with its
# fail points; `test` runs its fast part, `test-slow` the long runs (a
# 500-cycle crash loop, 8 senders x 10,000 tasks, every crash state of
# every spool transition, 100,000 tasks for the receipts' bound, the fuzz
# loop over the wire and disk parsers: about a quarter of an hour).
# A slow test skips itself without BATON_SLOW=1, and one that ran to its
# end prints `slow test ran: NAME`; `test-slow` counts those lines in its
# log and fails when none ran, or (under BATON_REQUIRE_ALL=1, as in CI)
# when fewer ran than `--list` names.
RELIABILITY = $(CARGO) test $(CARGOFLAGS) --features failpoints --test reliability
SLOW_LOG = target/test-slow.log

test:
	$(CARGO) test $(CARGOFLAGS)
	$(RELIABILITY)

# The whole suite under load: two CPU hogs, then pinned to one CPU
# (docs/testing.md).
test-busy:
	MAKE="$(MAKE)" sh .ci/busy

test-slow:
	mkdir -p target
	{ BATON_SLOW=1 $(RELIABILITY) -- _slow 2>&1 || echo "test-slow: cargo test failed (exit $$?)"; } | tee $(SLOW_LOG)
	@set -eu; \
	if grep -q '^test-slow: cargo test failed' $(SLOW_LOG); then exit 1; fi; \
	listed=$$($(RELIABILITY) -- _slow --list 2>/dev/null | grep -c ': test$$' || true); \
	ran=$$(grep -o 'slow test ran: [A-Za-z0-9_]*' $(SLOW_LOG) | sort -u | wc -l | tr -d ' '); \
	echo "test-slow: $$ran of $$listed slow tests ran"; \
	if [ "$$ran" -eq 0 ]; then \
		echo "test-slow: BATON_SLOW=1 ran no slow test" >&2; exit 1; \
	fi; \
	if [ "$$ran" -lt "$$listed" ] && [ "$${BATON_REQUIRE_ALL:-}" = 1 ]; then \
		echo "test-slow: a slow test skipped itself (BATON_REQUIRE_ALL=1)" >&2; exit 1; \
	fi

# One table of baton against baselines measured in the same run (see
# docs/performance.md); exits 1 when a ratio misses its target by more
# than 25%. Takes a few minutes and is noisy, so CI runs only the smoke
# version, which checks that every row produces a number.
bench:
	$(CARGO) test --release $(CARGOFLAGS) --test bench -- --full

bench-smoke:
	$(CARGO) test $(CARGOFLAGS) --test bench -- --smoke

# src/text/sanitize/tables.rs anew, the characters escaped as hiding text
# (docs/security.md), from Unicode's data files in UNICODE_DATA (Debian's
# unicode-data package): after a new Unicode version.
UNICODE_DATA ?= /usr/share/unicode
unicode:
	python3 src/text/sanitize/unicode.py $(UNICODE_DATA) > src/text/sanitize/tables.rs.new
	mv src/text/sanitize/tables.rs.new src/text/sanitize/tables.rs

# The packaging checks (.ci/package-check) build the dist tarball offline
# in a temporary directory, install it into a DESTDIR and compare the
# files, and look at what cargo package would publish.
check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy $(CARGOFLAGS) --all-targets -- -D warnings
	$(CARGO) test $(CARGOFLAGS)
	CARGO="$(CARGO)" sh .ci/package-check

# The program, its manual pages, the completions the installed program
# prints (so they complete the name it is installed as) and the hook
# scripts. See docs/packaging.md.
install: build
	$(MAKE) install-only

install-only:
	test -x "$(RELEASE)" || { echo "install-only: no binary at $(RELEASE); run make build or set RELEASE" >&2; exit 1; }
	install -d "$(DESTDIR)$(bindir)" "$(DESTDIR)$(man1dir)" "$(DESTDIR)$(man7dir)" \
		"$(DESTDIR)$(bashcompdir)" "$(DESTDIR)$(zshcompdir)" "$(DESTDIR)$(fishcompdir)" \
		"$(DESTDIR)$(pkgdatadir)"
	install -m 755 $(RELEASE) "$(DESTDIR)$(bindir)/$(BIN)"
	for h in $(HOOKS); do install -m 755 "docs/hooks/$$h" "$(DESTDIR)$(pkgdatadir)/$$h" || exit 1; done
	install -m 644 man/baton.1 "$(DESTDIR)$(man1dir)/$(BIN).1"
	install -m 644 man/baton-protocol.7 "$(DESTDIR)$(man7dir)/baton-protocol.7"
	"$(DESTDIR)$(bindir)/$(BIN)" completions bash > "$(DESTDIR)$(bashcompdir)/$(BIN)"
	"$(DESTDIR)$(bindir)/$(BIN)" completions zsh > "$(DESTDIR)$(zshcompdir)/_$(BIN)"
	"$(DESTDIR)$(bindir)/$(BIN)" completions fish > "$(DESTDIR)$(fishcompdir)/$(BIN).fish"
	chmod 644 "$(DESTDIR)$(bashcompdir)/$(BIN)" "$(DESTDIR)$(zshcompdir)/_$(BIN)" \
		"$(DESTDIR)$(fishcompdir)/$(BIN).fish"

uninstall:
	rm -f "$(DESTDIR)$(bindir)/$(BIN)" "$(DESTDIR)$(man1dir)/$(BIN).1" \
		"$(DESTDIR)$(man7dir)/baton-protocol.7" "$(DESTDIR)$(bashcompdir)/$(BIN)" \
		"$(DESTDIR)$(zshcompdir)/_$(BIN)" "$(DESTDIR)$(fishcompdir)/$(BIN).fish"
	for h in $(HOOKS); do rm -f "$(DESTDIR)$(pkgdatadir)/$$h"; done

VERSION = $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | sed -n 1p)
DIST = baton-$(VERSION)
# Every file in the tarball gets this mtime: $SOURCE_DATE_EPOCH when set
# (Debian and Fedora set it), else the last commit's time, else
# Cargo.toml's mtime (a tree unpacked from a dist tarball).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || stat -c %Y Cargo.toml)
# Sorted names, one owner, fixed modes and mtime, no gzip timestamp: two
# runs give the same bytes. GNU tar.
REPRO_TAR = tar --sort=name --owner=0 --group=0 --numeric-owner \
	--mode=u+rwX,go=rX --mtime=@$(SOURCE_DATE_EPOCH) --format=gnu

# A source tarball for distro builders, target/dist/baton-VERSION.tar.gz:
# the sources, every crate they need vendored (cargo vendor reaches
# crates.io for that, once, here) and a .cargo/config.toml that points
# cargo at them, so it builds with CARGOFLAGS="--locked --offline".
# tests/fuzz (a cargo-fuzz crate of its own) is left out. Reproducible:
# make distro-check builds it twice and compares.
dist:
	rm -rf target/dist/$(DIST) target/dist/$(DIST).tar.gz
	mkdir -p target/dist/$(DIST)/.cargo
	tar -cf - --exclude=__pycache__ --exclude=tests/fuzz Cargo.toml Cargo.lock LICENSE-MIT LICENSE-APACHE \
		README.md Makefile src tests man docs .ci | tar -xf - -C target/dist/$(DIST)
	cd target/dist/$(DIST) && $(CARGO) vendor --locked --versioned-dirs vendor > .cargo/config.toml
	$(REPRO_TAR) -C target/dist -cf - $(DIST) | gzip -9n > target/dist/$(DIST).tar.gz
	rm -rf target/dist/$(DIST)
	@echo target/dist/$(DIST).tar.gz

# Debian 12's rustc-web 1.85 (called by path) on the committed lock, a
# type-check for the BSDs and macOS, a reproducible make dist; then, in a
# Debian 13 chroot (root and debootstrap; cached in ~/.cache/baton-trixie),
# docs/examples/debian built offline with Debian's rustc and crates, its
# tests run, lintian, dpkg -i and a smoke run, and a second build that
# must give the same .debs. See .ci/distro-check and docs/packaging.md.
distro-check:
	sh .ci/distro-check

clean:
	$(CARGO) clean
