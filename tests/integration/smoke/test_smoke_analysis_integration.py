"""smoke's report of the user's variables, on a real run: what smoke sets itself is not reported as the user's."""

from __future__ import annotations

import pytest


@pytest.mark.integration
def test_variables_smoke_sets_itself_are_not_reported_as_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    from ncclcheck.collectors.launch import environment
    from ncclcheck.model.smoke import Launch
    from ncclcheck.smoke import fingerprint

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # the user's own: kept, and reported
    env = environment(Launch(1, 2, 0, "10.0.0.1", 29400, "nccl", "/tmp/run", ()), "eth9")
    assert env["GLOO_SOCKET_IFNAME"] == "eth9" and env["NCCL_DEBUG"] == "WARN"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reported = dict(fingerprint.collect(0, "gloo", "2.13.0", None).env)
    assert "GLOO_SOCKET_IFNAME" not in reported and "NCCL_DEBUG_FILE" not in reported
    assert reported["NCCL_DEBUG"] == "WARN"
