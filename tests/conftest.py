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
WORKERS = REPO / "tests" / "workers"  # the jobs the integration tier runs
# Helper modules whose fixtures serve tests in both tiers (a fixture imported into a test module is shadowed by its
# parameters): big_log, the large log of reading in parts.
pytest_plugins = ["big_logs"]
SYSFS = FIXTURES / "sysfs"
SCENARIOS = ("scenario1_ib_roce_down", "scenario2_roce_ipv6_ib_init_container")


def pytest_configure(config: pytest.Config) -> None:
    """The tests send ^C as a user at a terminal does. A suite started in the background by a shell without job
    control (``cmd &``, some CI runners) inherits SIGINT *ignored*, and so would every program it starts: ^C
    would reach nobody and the tests of it would hang. A Python handler is reset to the default on exec, so
    installing one here gives every child the default a terminal gives."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def has_gpu() -> bool:
    """An NVIDIA driver with a device node: where the gpu tier can run."""
    return os.path.exists("/dev/nvidiactl") and any(
        n.startswith("nvidia") and n[6:].isdigit() for n in os.listdir("/dev")
    )


UNIT = REPO / "tests" / "unit"  # the pure tier, by the package's layers: unit/<layer>/test_*.py
INTEGRATION = REPO / "tests" / "integration"  # real processes, sockets, terminals: integration/<command>/test_*.py


def tier_errors(items: list[pytest.Item]) -> list[str]:
    """The tier is the folder: every test under tests/integration is marked ``integration`` (whatever its module
    says), and one under tests/unit that carries the mark, or a test outside both folders, is an error."""
    errors = []
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(INTEGRATION):
            if item.get_closest_marker("integration") is None:
                item.add_marker(pytest.mark.integration)
        elif not path.is_relative_to(UNIT):
            errors.append(f"{item.nodeid}: a test outside tests/unit and tests/integration")
        elif item.get_closest_marker("integration") is not None:
            errors.append(
                f"{item.nodeid}: marked integration under tests/unit: move it to tests/integration/<command>/"
            )
    return errors


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by the marks this adds
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's tier from its folder (``tier_errors``); then the gpu tier is deselected (not skipped) where there
    is no GPU: a machine without one runs none of it."""
    errors = tier_errors(items)
    if errors:
        raise pytest.UsageError("\n".join(["tests in the wrong tier's folder:", *errors]))
    if has_gpu():
        return
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu:
        config.hook.pytest_deselected(items=gpu)
        items[:] = [item for item in items if item.get_closest_marker("gpu") is None]


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


def _refuse(what: str) -> Any:
    def refused(*args: object, **kwargs: object) -> None:
        raise NotPure(f"a pure-tier test {what}: mark it @pytest.mark.integration")

    return refused


# What the pure tier may not do, and the real thing each stands for while it runs.
_GUARDED: list[tuple[Any, str, str]] = [
    (subprocess.Popen, "_execute_child", "started a process"),
    (os, "fork", "forked"),
    (os, "posix_spawn", "started a process"),
    (socket.socket, "connect", "opened a connection"),
    (socket.socket, "bind", "bound a socket"),
]
_REAL = [getattr(owner, name) for owner, name, _ in _GUARDED]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    """The pure tier (every test without the ``integration`` mark; ``make test-fast``) starts no process, forks
    nothing and opens no network connection, in the test or in any fixture it sets up (a module-scoped one too):
    this holds it to that, so the tier cannot grow slow by accident. A test that needs a real process, socket,
    namespace or terminal is marked ``integration``. Teardown runs unguarded (a module fixture's cleanup)."""
    if item.get_closest_marker("integration") is None:
        for owner, name, what in _GUARDED:
            setattr(owner, name, _refuse(what))
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    for (owner, name, _), real in zip(_GUARDED, _REAL):
        setattr(owner, name, real)
    yield
