"""``ncclcheck watch --help`` in a real process: it names the Enter key."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.integration
def test_help_names_the_enter_key() -> None:
    done = subprocess.run([sys.executable, "-m", "ncclcheck", "watch", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "Enter stack" in done.stdout
