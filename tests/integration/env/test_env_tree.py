"""``env --root DIR``: what a saved tree holds is read, what it lacks is said, and this machine never fills in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

SAVE = REPO / "probes" / "save_tree.py"


def env_root(root: Path, **extra: str) -> tuple[int, dict[str, Any], str]:
    """``ncclcheck env --json --root`` in an environment of our own (no NCCL_* of this shell)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TORCH_", "GLOO_", "MASTER_"))}
    done = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "env", "--json", "--root", str(root)],
        capture_output=True,
        text=True,
        env={**clean, **extra},
        timeout=120,
    )
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, report, done.stderr


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["checks"]}


@pytest.mark.integration
def test_an_empty_tree_is_never_described_with_this_machine(tmp_path: Path) -> None:
    code, report, _ = env_root(tmp_path, NCCL_IB_DISABLE="yes")  # this shell's variable must not be judged
    found = checks(report)
    for check_id, part in (
        ("versions", "versions"),
        ("env.vars", "environment"),
        ("net.interfaces", "interfaces"),
        ("net.socket_ifname", "interfaces"),
        ("net.gloo", "interfaces"),
    ):
        assert found[check_id]["status"] == "skip", check_id
        assert f"{part} not in the saved tree" in found[check_id]["summary"]
        assert "probes/save_tree.py" in found[check_id]["summary"]
    assert report["not_saved"] == ["versions", "environment", "interfaces"] and code == 0
    assert report["host"] == f"the tree {tmp_path}"
    done = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "env", "--root", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert "nothing on this node blocks" not in done.stdout and "not checked" in done.stdout


@pytest.mark.integration
def test_a_saved_tree_is_read_for_versions_environment_interfaces_and_shm(tmp_path: Path) -> None:
    tree = tmp_path / "node7"
    saver = {**os.environ, "NCCL_IB_DISABLE": "yes", "NCCL_SOCKET_IFNAME": "=lo"}
    done = subprocess.run(
        [sys.executable, str(SAVE), str(tree)], capture_output=True, text=True, env=saver, timeout=180
    )
    assert done.returncode == 0 and f"ncclcheck env --root {tree}" in done.stdout, done.stderr
    saved = json.loads((tree / "ncclcheck-tree.json").read_text())
    assert saved["schema"] == "ncclcheck.tree/1" and saved["environ"]["NCCL_IB_DISABLE"] == "yes"
    code, report, _ = env_root(tree)  # this environment has neither variable: they come from the tree
    found = checks(report)
    assert code == 1 and report["not_saved"] == []
    assert found["env.vars"]["status"] == "fail" and "NCCL_IB_DISABLE=yes" in found["env.vars"]["summary"]
    assert "lo" in found["net.socket_ifname"]["summary"]  # NCCL_SOCKET_IFNAME==lo, from the saved environment
    python = ".".join(map(str, sys.version_info[:3]))
    assert python in " ".join(found["versions"]["details"])
    assert found["host.shm"]["status"] != "skip" and "MiB" in found["host.shm"]["summary"]
    assert report["host"].endswith("(saved)")


@pytest.mark.integration
def test_save_tree_refuses_a_directory_that_holds_files(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("mine")
    done = subprocess.run([sys.executable, str(SAVE), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not an empty directory" in done.stderr and (tmp_path / "x").read_text() == "mine"


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("ifaddrs.json", "{not json", "ifaddrs.json is not a list of interfaces"),
        ("ifaddrs.json", '[{"name": "eth0"}]', "no 'family' field"),
        ("proc/self/status", "Name:\tpython\nCapEff:\tzz\n", "CapEff is 'zz', not a hex capability mask"),
        ("ncclcheck-tree.json", '{"schema": "other"}', "is not what probes/save_tree.py writes"),
    ],
)
def test_a_malformed_saved_file_is_one_line(tmp_path: Path, name: str, text: str, words: str) -> None:
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
    code, _, err = env_root(tmp_path)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
