"""CI's skip policy: with --strict-skips a skip that tests/expected_skips.txt does not allow
fails."""

import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).with_name("skip_policy_probe.py")


def run(*options):
    return subprocess.run([sys.executable, "-m", "pytest", str(PROBE), "-q", *options],
                          capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).parents[1])


def test_an_unexpected_skip_fails_under_strict_skips():
    result = run("--strict-skips")
    assert result.returncode == 1, result.stdout
    assert "unexpected skip" in result.stdout and "nothing to test here" in result.stdout

