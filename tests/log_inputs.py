"""What the tests of ``ncclcheck logs``'s inputs feed it: a real NCCL error line, training output, and
the command's JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ncclcheck.cli import main

ERROR = "node1:2211:2299 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node3<47362>"


TRAIN = "step {i} | loss 2.3142 | lr 3.00e-04 | grad_norm 0.731 | tokens/s 51234\n"


def logs(capsys: pytest.CaptureFixture[str], *paths: str) -> tuple[int, dict[str, Any]]:
    code = main(["logs", "--json", *paths])
    return code, json.loads(capsys.readouterr().out)
