"""``smoke --isolate`` across nodes: node 0 serves a store the nodes meet on; each stage runs ``ncclcheck smoke``.

The store is a torch TCPStore on ``--master-addr:--master-port`` (node 0 hosts it); the stages' own jobs use
the ports above it. Each member of a stage's group runs a whole ``ncclcheck smoke`` (its watchdog included) in a
session of its own, so that ending this process's tree ends the stage's torchrun and every rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

CONNECT_S = 60.0


def open_store(addr: str, port: int, host: bool, within_s: float = CONNECT_S) -> Any:
    """Node 0 hosts the store; the other nodes connect to it, trying again for ``within_s``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

    deadline = time.monotonic() + within_s
    while True:
        try:
            return TCPStore(addr, port, is_master=host, wait_for_workers=False, timeout=timedelta(seconds=10))
        except Exception:
            if host or time.monotonic() + 1.0 >= deadline:
                raise
            time.sleep(1.0)


def post(store: Any, key: str, value: dict[str, Any]) -> None:
    store.set(f"ncclcheck/isolate/{key}", json.dumps(value))


def wait(store: Any, key: str, within_s: float) -> dict[str, Any] | None:
    """The value posted under ``key``, or None when nothing came within ``within_s``."""
    full = f"ncclcheck/isolate/{key}"
    try:
        store.wait([full], timedelta(seconds=within_s))
        value: dict[str, Any] = json.loads(store.get(full))
    except Exception:  # the store's timeout, or node 0 gone
        return None
    return value


def posted(store: Any, key: str) -> dict[str, Any] | None:
    """The value posted under ``key`` if there is one now (no wait), else None."""
    full = f"ncclcheck/isolate/{key}"
    try:
        if not store.check([full]):
            return None
        value: dict[str, Any] = json.loads(store.get(full))
    except Exception:  # node 0 gone
        return None
    return value


def start_member(argv: Sequence[str], log_path: str) -> subprocess.Popen[bytes]:
    """``ncclcheck smoke ARGV`` for this node's part of a stage, its output to ``log_path``."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    log = open(log_path, "wb")  # noqa: SIM115 - owned by the child
    return subprocess.Popen(
        [sys.executable, "-m", "ncclcheck", "smoke", *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def read_report(path: str) -> dict[str, Any] | None:
    """The member's ``ncclcheck.smoke/1`` report, or None when it wrote none."""
    try:
        with open(path, encoding="utf-8") as handle:
            report: dict[str, Any] = json.load(handle)
    except (OSError, ValueError):
        return None
    return report
