# gatecmd — the two commands a fresh Debian 12 machine needs:
#   make run    install what is missing, build, serve the bundled config on 127.0.0.1:9222
#   make test   install what is missing, run the whole test suite
#   make demo   (optional) two virtual RK3588 boards and gatecmd serving them on
#               127.0.0.1:9222: on this machine's USB stack (root, dummy_hcd, not a
#               container), else in the project's QEMU VM (no root); one line where neither
#   make build && sudo make install   install as a systemd service (scripts/install.sh;
#                                     DESTDIR=/tmp/root or PREFIX=/usr honoured)
#   make deb    the Debian package (cargo-deb, release build): target/debian/gatecmd_*.deb
.PHONY: run demo bench-demo test setup test-setup build lint test-lane test-python test-ts conformance install deb test-deb bench bench-smoke bench-vboard bench-flash bench-lab screenshot-vboard soak soak-smoke hot-code

# The server's crates, as every cargo test of `make test` selects them: the same selection
# resolves the same features, so nothing is built twice (scripts/cargo-tests.sh).
SERVER := --workspace --exclude gatecmd-vboard

setup:
	./scripts/setup.sh

test-setup:
	./scripts/setup.sh --test

build: setup
	cargo build --release --locked

run: build
	./target/release/gatecmd serve --config allowed_commands.yaml

# Not dependent on `build`: the script checks the host first (root, dummy_hcd, not a
# container: the boards on its USB stack; else QEMU: the boards in the project's VM,
# scripts/demo_vm.py), installs what is missing (scripts/setup.sh --demo), builds, and
# refuses in one line before building anything where neither can run (scripts/demo.sh).
demo:
	./scripts/demo.sh

lint:
	cargo fmt --check
	cargo clippy --workspace --all-targets --locked -- -D warnings
	# The build without libudev (libusb backend only) must stay clean too.
	cargo clippy -p gatecmd -p gatecmd-devices --no-default-features --lib --locked -- -D warnings

test: test-setup lint
	# cargo test, its test binaries two at a time (scripts/cargo-tests.sh says why).
	./scripts/cargo-tests.sh
	# The Debian package installed, checked and purged on this machine: alone, since it
	# changes what the other tests would find in /etc (tests/server/deb_package.rs).
	cargo test --locked $(SERVER) --test server deb_package:: -- --ignored
	# gatecmd-vboard (vboard/): its unit tests, and rkdeveloptool against it in a usbvm guest.
	cargo test --locked -p gatecmd-vboard
	# pytest and the TypeScript SDK tests side by side, then the conformance suites.
	./scripts/client-tests.sh
	GATECMD_BENCH_SMOKE=1 cargo test --locked $(SERVER) --bench gatecmd

# Only the Debian package's test: build, dpkg -i, gatecmd check, dpkg --purge (as root).
test-deb: test-setup
	cargo test --locked $(SERVER) --test server deb_package:: -- --ignored

# The MCP Python SDK against the real binary (tests/python, own .venv).
test-python: test-setup
	./scripts/pytest.sh

# Only the service lane: the .deb under systemd in a Debian 12 guest, 4 to 5 minutes on a
# loaded 2-core machine (docs/PERFORMANCE.md)
# (tests/python/test_service_lane.py; make test-python runs it among the others).
test-lane: test-setup
	./scripts/pytest.sh test_service_lane.py

# The official MCP TypeScript SDK (tests/ts, default options) against the real binary.
test-ts: test-setup
	./scripts/ts-tests.sh

# The MCP conformance suites, 2025 and 2026-07-28 (project-local Node 22 in .node/).
conformance: test-setup
	./scripts/conformance.sh

# Not dependent on `build`: `sudo make install` should not run cargo as root.
install:
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" ./scripts/install.sh

# The Debian package of the release build (scripts/deb.sh; README.md "Install the Debian
# package"). As yourself, not root: `sudo apt install ./target/debian/gatecmd_*.deb` after.
deb:
	./scripts/setup.sh --deb
	./scripts/deb.sh

# Benchmarks (not part of `make test`): starts the release server itself, prints one table.
bench: test-setup
	./scripts/venv.sh
	cargo bench --locked --bench gatecmd
	# Bench page update latency (event -> DOM) in headless Chromium, on the release binary.
	.venv/bin/python benches/page_latency.py

# Flashing on virtual boards (gatecmd-vboard) in a usbvm VM, release build (not part of
# `make test`): wl of 64 MiB through gatecmd vs rkdeveloptool directly, power on -> login:.
bench-vboard: test-setup
	./scripts/venv.sh
	cargo build --release --locked --bin gatecmd
	cargo build --release --locked -p gatecmd-vboard
	.venv/bin/python benches/vboard.py

# flash_board against rkdeveloptool (issue 32, docs/PERFORMANCE.md "flash_board"): the same
# VM with release binaries; dense 64 MiB at 64 KiB and 4 MiB transfers, a 25 % bmap end to end.
bench-flash: test-setup
	./scripts/venv.sh
	cargo build --release --locked --bin gatecmd
	cargo build --release --locked -p gatecmd-vboard
	.venv/bin/python benches/flash_board.py

# make demo's VM path timed (benches/demo.py, docs/PERFORMANCE.md "make demo in the VM"; not
# part of `make test`): make demo with release binaries, banner, one MCP call, Ctrl-C, 5 times.
bench-demo: test-setup
	./scripts/venv.sh
	cargo build --release --locked --bin gatecmd
	cargo build --release --locked -p gatecmd-vboard
	.venv/bin/python benches/demo.py

# labgrid rows (issue 25, docs/LAB.md; not part of `make test`): a real labgrid 26
# coordinator on loopback, acquire -> agent refusal latency and reconnection time.
bench-lab: test-setup
	./scripts/venv.sh
	cargo build --release --locked --bin gatecmd
	.venv/bin/python benches/lab_rows.py

# docs/img/vboard-flash.png: the bench page in headless Chromium during a real flash of a
# virtual board.
screenshot-vboard: test-setup
	./scripts/venv.sh
	cargo build --release --locked --bin gatecmd
	cargo build --release --locked -p gatecmd-vboard
	.venv/bin/python benches/vboard_page.py

# link/hot-code.order (build.rs, docs/PERFORMANCE.md "Idle RSS beside the peer"): the functions a
# serving server runs, recorded under valgrind's callgrind from the release build. Again
# after a toolchain or dependency update. Needs valgrind.
hot-code: test-setup
	./scripts/venv.sh
	.venv/bin/python scripts/hot-code.py

bench-smoke: test-setup
	./scripts/venv.sh
	GATECMD_BENCH_SMOKE=1 cargo bench --locked --bench gatecmd

# Soak (issue 15, not part of `make test`): 64 sessions on 16 umockdev boards beside a slowloris
# and a progress-flood client, the issue-22 attackers and (issue 29) a labgrid coordinator with
# an attacker on the bridge's console and power ports, GATECMD_SOAK_SECS long (default 300);
# prints one report.
soak: test-setup
	./scripts/venv.sh
	cargo bench --locked --bench soak

soak-smoke: test-setup
	./scripts/venv.sh
	GATECMD_BENCH_SMOKE=1 cargo bench --locked --bench soak
