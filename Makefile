# consoled: `make run` serves on 127.0.0.1:8080, `make test` runs everything.
# Both start a private PostgreSQL cluster under .pg/ unless DATABASE_URL is set.

SHELL := /bin/bash
CARGO ?= cargo
DEV_PG_PORT ?= 55432
TEST_PG_PORT ?= 55433

.PHONY: run test build lint unit db-up db-down bench bench-compare bench-idle bench-resume clean e2e conformance deb prepare

build:
	$(CARGO) build --release --locked

# PORT is the one place for the port: listen address, public URL (Origin check, OAuth redirect)
# and the links in mails all follow it. Without SMTP, each mailed link is also logged.
PORT ?= 8080

run: build
	@url="$${DATABASE_URL:-$$(scripts/pg.sh start dev $(DEV_PG_PORT))}"; \
	[ -n "$$url" ] || { echo "no database to use (pg.sh said why above)" >&2; exit 1; }; \
	base="$${CONSOLED_BASE_URL:-http://127.0.0.1:$(PORT)}"; \
	if [ -z "$${CONSOLED_SMTP_URL:-}" ]; then links=true; where="./mail, links also in this log"; \
	else links=false; where="CONSOLED_SMTP_URL"; fi; \
	echo "consoled: $$base/ (database $${url%%\?*}; mail goes to $$where)"; \
	DATABASE_URL="$$url" CONSOLED_LISTEN="$${CONSOLED_LISTEN:-127.0.0.1:$(PORT)}" \
	CONSOLED_BASE_URL="$$base" CONSOLED_MAIL_LOG_LINKS=$$links \
	CONSOLED_COOKIE_SECURE=$${CONSOLED_COOKIE_SECURE:-false} \
	CONSOLED_DEMO=$${CONSOLED_DEMO:-true} exec target/release/consoled serve

# Everything: formatting, lints, unit and integration tests against a real PostgreSQL (and Debian's
# nginx and HAProxy in front of the service, tests/proxy.rs: scripts/proxy-deps.sh installs them
# as root). Four test threads (TEST_THREADS): on two cores, eight tests' servers starting
# at once seemed to make the tests' "within a second" ends late now and then.
# Then the conformance run with a fixed seed (about 30 s; docs/CONFORMANCE.md), when python3 can
# make a virtualenv; SKIP_CONFORMANCE=1 leaves it out.
# `prepare` first: Patroni and etcd for tests/patroni.rs (scripts/ha-deps.sh), and the clean
# Debian root of the package test (tests/package.rs), made in the background while the rest
# builds and runs (scripts/debroot.sh); as root only, else those tests say they are skipped.
test: prepare lint
	@scripts/proxy-deps.sh
	@scripts/oidc-deps.sh
	@url="$${DATABASE_URL:-$$(scripts/pg.sh start test $(TEST_PG_PORT))}"; \
	[ -n "$$url" ] || { echo "no database to use (pg.sh said why above)" >&2; exit 1; }; \
	DATABASE_URL="$$url" $(CARGO) test --locked --lib --bins --tests -- --test-threads=$${TEST_THREADS:-4} && \
	if [ -n "$${SKIP_CONFORMANCE:-}" ]; then echo "conformance: skipped (SKIP_CONFORMANCE)"; \
	elif python3 -c 'import venv, ensurepip' 2>/dev/null; then \
		DATABASE_URL="$$url" CONFORMANCE_SEED=$${CONFORMANCE_SEED:-1} scripts/conformance.sh; \
	else echo "conformance: skipped (python3 with venv is not available)"; fi

# The demo page in Debian's headless chromium (installed when missing, as root); not part of
# `make test`. The screenshots are kept in target/e2e/. The page across a restart
# (tests/e2e_resume.rs) runs two instances behind Debian's HAProxy (scripts/cluster-deps.sh).
e2e:
	@scripts/e2e-deps.sh
	@scripts/cluster-deps.sh
	@url="$${DATABASE_URL:-$$(scripts/pg.sh start test $(TEST_PG_PORT))}"; \
	[ -n "$$url" ] || { echo "no database to use (pg.sh said why above)" >&2; exit 1; }; \
	DATABASE_URL="$$url" $(CARGO) test --locked --test e2e --test e2e_resume -- --ignored --nocapture

prepare:
	@scripts/ha-deps.sh || echo "patroni test: Patroni will not be had here (see above)"
	@scripts/debroot.sh start || echo "package test: no Debian root will be made here (see above)"

# consoled_<version>_amd64.deb in target/deb/ (version: Cargo.toml), from a release build;
# packaging/deb.sh says what goes in it, docs/OPERATIONS.md "Installing the package" how to use it.
deb: build
	@packaging/deb.sh

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

db-up:
	@scripts/pg.sh start dev $(DEV_PG_PORT)

db-down:
	@scripts/pg.sh stop dev; scripts/pg.sh stop test

# BENCH=checks (or any names of benches/*.rs, space-separated) runs only those.
bench:
	@url="$${DATABASE_URL:-$$(scripts/pg.sh start test $(TEST_PG_PORT))}"; \
	[ -n "$$url" ] || { echo "no database to use (pg.sh said why above)" >&2; exit 1; }; \
	$(CARGO) build --release --locked --bins --benches && DATABASE_URL="$$url" benches/run.sh $(BENCH)

# consoled against the async reference under benches/compare (its own Cargo workspace, never
# built by run or test): the same stream ladder, back to back, one database; table and PNGs in
# docs/bench-compare/. QUICK=1: a smaller ladder into benches/out/compare-quick/; ROUNDS=N repeats
# the pair, alternating which goes first. See BENCHMARKS.md. consoled runs in both delivery modes
# (a column `consoled (CONSOLED_STREAM_DIRECT=false)`), and each server then takes a reconnect
# storm of STORM streams (default 5,000) on a fresh instance. Each also runs the fan-out rungs on a
# fresh instance in two other client shapes: a blocking client thread per stream, and the light
# client beside CPU-bound neighbour processes (issue 38).
bench-compare:
	@QUICK="$(QUICK)" ROUNDS="$(ROUNDS)" STORM="$(STORM)" benches/compare/run.sh

# A rolling restart of two instances behind the shipped contrib/haproxy.cfg with 3,000 streams
# that resume (issue 35): benches/resume.sh builds the baseline (BASELINE, default the commit
# before issue 35) and this tree and runs both; STREAMS=300 for a small run. BENCHMARKS.md,
# "Resuming".
bench-resume:
	@scripts/cluster-deps.sh
	@url="$${DATABASE_URL:-$$(scripts/pg.sh start test $(TEST_PG_PORT))}"; \
	[ -n "$$url" ] || { echo "no database to use (pg.sh said why above)" >&2; exit 1; }; \
	DATABASE_URL="$$url" STREAMS="$(STREAMS)" BASELINE="$(BASELINE)" benches/resume.sh

# An idle consoled's resident memory, mapping by mapping, fresh, after logins, after STREAMS
# streams (default 1,000) and after the hash memory's keep time; REF=1 adds the async reference's
# (built by bench-compare); KEEP and TRIM shorten the two settings. BENCHMARKS.md, "Idle memory".
bench-idle:
	@url="$${DATABASE_URL:-$$(scripts/pg.sh start test $(TEST_PG_PORT))}"; \
	[ -n "$$url" ] || { echo "no database to use (pg.sh said why above)" >&2; exit 1; }; \
	DATABASE_URL="$$url" STREAMS="$(STREAMS)" REF="$(REF)" KEEP="$(KEEP)" TRIM="$(TRIM)" benches/idle.sh

clean: db-down
	rm -rf .pg target mail

# schemathesis (pinned, from PyPI into .venv-conformance/) against a live server, from the
# server's own OpenAPI document; see docs/CONFORMANCE.md.
conformance:
	@url="$${DATABASE_URL:-$$(scripts/pg.sh start test $(TEST_PG_PORT))}"; \
	[ -n "$$url" ] || { echo "no database to use (pg.sh said why above)" >&2; exit 1; }; \
	DATABASE_URL="$$url" scripts/conformance.sh
