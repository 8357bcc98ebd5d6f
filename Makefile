# baton: build, test, install. GNU make.

CARGO ?= cargo
CARGOFLAGS ?= --locked
BIN ?= baton

prefix ?= /usr/local
bindir ?= $(prefix)/bin
datarootdir ?= $(prefix)/share
mandir ?= $(datarootdir)/man

RELEASE := target/release/baton

.PHONY: all build demo test check install uninstall clean

all: build

build:
	$(CARGO) build --release $(CARGOFLAGS)

# Two agents in temporary directories hand a task over; everything they
# start is stopped and removed at the end.
demo: build
	sh tests/demo.sh $(RELEASE)

test:
	$(CARGO) test $(CARGOFLAGS)

check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy $(CARGOFLAGS) --all-targets -- -D warnings
	$(CARGO) test $(CARGOFLAGS)

install: build
	install -Dm755 $(RELEASE) $(DESTDIR)$(bindir)/$(BIN)
	install -Dm644 man/baton.1 $(DESTDIR)$(mandir)/man1/$(BIN).1

uninstall:
	rm -f $(DESTDIR)$(bindir)/$(BIN) $(DESTDIR)$(mandir)/man1/$(BIN).1

clean:
	$(CARGO) clean
