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


@pytest.mark.integration
def test_the_command_imports_torch_unless_told_not_to_and_then_says_it_did_not() -> None:
    """``ncclcheck env`` as a user runs it, under a variable that breaks ``import torch.distributed``: it fails the
    versions check; with ``--no-import`` the import is not tried, nothing fails for it, and the details say so."""
    pytest.importorskip("torch")
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TORCH_DISTRIBUTED_DEBUG": "FULL"}

    def versions_check(*flags: str) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-m", "ncclcheck", "env", "--json", *flags], env=env, capture_output=True, text=True
        )
        (found,) = [c for c in json.loads(done.stdout)["checks"] if c["id"] == "versions"]
        return dict(found)

    tried = versions_check()
    assert tried["status"] == "fail" and "because of TORCH_DISTRIBUTED_DEBUG=FULL" in str(tried["summary"]), tried
    assert "not tried" not in json.dumps(tried)
    skipped = versions_check("--no-import")
    assert "TORCH_DISTRIBUTED_DEBUG" not in json.dumps(skipped), skipped
    assert "import torch.distributed: not tried (--no-import)" in json.dumps(skipped), skipped
