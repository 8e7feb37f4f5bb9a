"""The README's two commands and CI: CI runs exactly the README's test command, and the
setup script they call refuses a bad argument in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_command(marker: str) -> str:
    lines = [line.strip() for line in (ROOT / "README.md").read_text().splitlines()
             if line.strip().startswith("./setup.sh") and marker in line]
    assert len(lines) == 1, f"README.md should give one command with {marker!r}: {lines}"
    return lines[0]


def test_ci_runs_exactly_the_readmes_test_command():
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.strip().startswith("#")]
    test_command = _readme_command("pytest")
    assert ci[-1] == test_command
    # The test invocation itself: pytest's options live in pyproject.toml, not here.
    assert test_command == "./setup.sh --test && . .venv/bin/activate && python -m pytest -q"
    # CI requires the tests that would otherwise skip for a missing install.
    for name in ("POSTGRES", "BROWSER", "SUFFIX", "LLAMA_SERVER", "SGLANG"):
        assert f"export AUTOTUNE_REQUIRE_{name}=1" in ci[:-1], name


def test_the_readmes_main_job_command_runs_the_search():
    assert _readme_command("autotune search").startswith("./setup.sh && ")


def test_setup_refuses_a_bad_argument_in_one_line():
    done = subprocess.run(["bash", str(ROOT / "setup.sh"), "--bogus"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--bogus" in done.stderr
    assert not done.stdout
