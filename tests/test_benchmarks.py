"""Every benchmark script starts and explains itself (they are not run in CI)."""

import pathlib
import subprocess
import sys

import pytest

BENCHMARKS = sorted((pathlib.Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def test_there_are_benchmarks():
    assert len(BENCHMARKS) >= 5


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_help(script):
    proc = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout
