"""A crash read across lines on a live process: a real segfault on rank 1 is named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import WORKERS

from ncclcheck.cli import main


@pytest.mark.integration
def test_a_live_segfault_on_rank_1_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "segv.log"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    with log.open("wb") as out:
        subprocess.run([*cmd, str(WORKERS / "native_crash.py")], stdout=out, stderr=subprocess.STDOUT, timeout=120)
    assert main(["logs", "--json", str(log)]) == 1
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert verdict["root_cause"] == "native-crash" and verdict["culprits"] == [1]
    assert "native_crash.py:17 in crash" in verdict["message"]
