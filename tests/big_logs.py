"""A large job log built from every real excerpt (training output, a wrapped NCCL error, blank lines):
what the tests of reading logs in parts read."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

LOGS = sorted((FIXTURES / "nccl_logs").glob("*.log")) + sorted((FIXTURES / "torchrun").glob("*.log"))


def job_text() -> str:
    """Every fixture, with training output, a terminal-wrapped NCCL error and blank lines between them."""
    wrapped = "node7:4242:4250 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.8<52044> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.7 remoteGid ::ffff:10.0.0.8 hca mlx5_2"
    folded = "\n".join(wrapped[i : i + 80] for i in range(0, len(wrapped), 80))
    steps = "".join(f"[rank{r % 8}]:step {r} | loss {r % 97 / 10:.2f}\n" for r in range(300))
    parts = [steps]
    for path in LOGS:
        parts += [path.read_text(encoding="utf-8", errors="replace"), "\n  \n\n", steps, folded + "\n"]
    return "".join(parts)


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    text = job_text()
    log = tmp_path_factory.mktemp("big") / "big.log"
    with log.open("w", encoding="utf-8") as out:
        for _ in range(max(1, (48 << 20) // len(text))):
            out.write(text)
    return log
