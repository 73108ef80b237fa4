"""`make demo` (scripts/demo.sh) on a host that cannot run it says why in one line and exits
non-zero, before building or starting anything. On a host that can (Linux, root, dummy_hcd
loadable, not a container), `--check` says so and exits 0: the full demo is not started by
the test suite (it runs until Ctrl-C); tests/python/test_vboard_usbvm.py runs the same
boards in a VM."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "demo.sh"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def in_container() -> bool:
    return Path("/.dockerenv").exists() or Path("/run/.containerenv").exists()


def test_make_demo_runs_the_script():
    # --no-print-directory: under `make test` this make is a sub-make (MAKELEVEL is set), which
    # would otherwise wrap its output in "Entering/Leaving directory" lines.
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo"], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "./scripts/demo.sh", out.stdout


def test_demo_refuses_in_one_line_or_says_it_can_run():
    check = run("--check")
    if check.returncode == 0:
        # A host that can run the demo (e.g. a CI machine with Debian's kernel, as root).
        assert not in_container()
        assert check.stdout.startswith("make demo: this host can run the demo"), check.stdout
        return
    assert check.returncode == 1, check
    lines = check.stderr.splitlines()
    assert len(lines) == 1, check.stderr
    assert lines[0].startswith("make demo: cannot run here: "), lines
    assert check.stdout == ""
    # The demo itself refuses with the same line, before building anything: no cargo
    # output, no demo directory.
    demo_dir = Path(os.environ.get("GATECMD_DEMO_DIR", "/var/lib/gatecmd-demo"))
    existed = demo_dir.exists()
    full = run()
    assert full.returncode == 1, full
    assert full.stderr.splitlines() == lines, full.stderr
    assert full.stdout == ""
    assert demo_dir.exists() == existed


def test_in_a_container_the_reason_is_the_container():
    check = run("--check")
    if not in_container() or check.returncode == 0:
        # Not a container here: the line is one of the other reasons (covered above).
        assert check.returncode in (0, 1)
        return
    line = check.stderr.strip()
    assert "this is a container" in line, line
    assert "run make demo on a Linux host or VM as root" in line, line
