from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"  # copied from ../shared/fixtures: a clone runs the whole suite alone
SYSFS = FIXTURES / "sysfs"
SCENARIOS = ("scenario1_ib_roce_down", "scenario2_roce_ipv6_ib_init_container")


def pytest_configure(config: pytest.Config) -> None:
    """The tests send ^C as a user at a terminal does. A suite started in the background by a shell without job
    control (``cmd &``, some CI runners) inherits SIGINT *ignored*, and so would every program it starts: ^C
    would reach nobody and the tests of it would hang. A Python handler is reset to the default on exec, so
    installing one here gives every child the default a terminal gives."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def scenario(name: str) -> Path:
    path = SYSFS / name
    if not path.is_dir():
        pytest.fail(f"fixture missing: {path}")
    return path


def expected(name: str) -> dict[str, Any]:
    with open(scenario(name) / "expected.json", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


class NotPure(AssertionError):
    """A test of the pure tier started a process or used the network."""


@pytest.fixture(autouse=True)
def _pure_tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pure tier (every test without the ``integration`` mark; ``make test-fast``) starts no process, forks
    nothing, and opens no network connection: this holds it to that, so the tier cannot grow slow by accident.
    A test that needs a real process, socket, namespace or terminal is marked ``integration``."""
    if request.node.get_closest_marker("integration"):
        return

    def refuse(what: str) -> Any:
        def refused(*args: object, **kwargs: object) -> None:
            raise NotPure(f"a pure-tier test {what}: mark it @pytest.mark.integration")

        return refused

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("started a process"))
    monkeypatch.setattr(os, "fork", refuse("forked"))
    monkeypatch.setattr(os, "posix_spawn", refuse("started a process"))
    monkeypatch.setattr(socket.socket, "connect", refuse("opened a connection"))
    monkeypatch.setattr(socket.socket, "bind", refuse("bound a socket"))
