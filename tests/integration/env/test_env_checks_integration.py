"""env's checks where only a real child process tells: a real ``import torch.distributed`` under a bad
variable is blamed on the variable."""

from __future__ import annotations

import pytest
from snapshots import bare, check

from ncclcheck.model.checks import Status
from ncclcheck.probes import versions


@pytest.mark.integration
def test_a_real_import_under_a_bad_variable_is_blamed_on_the_variable() -> None:
    """A real child ``import torch.distributed`` under TORCH_DISTRIBUTED_DEBUG=FULL, as the env collector runs it."""
    pytest.importorskip("torch")
    import os

    env = {**os.environ, "TORCH_DISTRIBUTED_DEBUG": "FULL"}
    facts = versions.collect("/", try_import=True, environ=env)
    assert facts.torch_import_error and "TORCH_DISTRIBUTED_DEBUG" in facts.torch_import_error
    result = check(bare({"TORCH_DISTRIBUTED_DEBUG": "FULL"}, versions=facts), "versions")
    assert result.status is Status.FAIL and "because of TORCH_DISTRIBUTED_DEBUG=FULL" in result.summary
    healthy = versions.collect("/", try_import=True, environ={**os.environ, "TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    assert healthy.torch_import_error is None
