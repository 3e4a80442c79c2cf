"""``ncclcheck env --root`` end to end over the two sysfs scenarios, through the real CLI."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import SCENARIOS, scenario

from ncclcheck.cli import main


def run_env(capsys: pytest.CaptureFixture[str], name: str, *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["env", "--json", "--root", str(scenario(name)), *extra])
    return code, json.loads(capsys.readouterr().out)


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["checks"]}


def test_schema_and_required_ids(capsys: pytest.CaptureFixture[str]) -> None:
    _, report = run_env(capsys, SCENARIOS[0])
    assert report["schema"] == "ncclcheck.env/1"
    required = {
        "versions",
        "gpus",
        "ib.devices",
        "ib.gid_index",
        "ib.memlock",
        "ib.peermem",
        "net.interfaces",
        "net.socket_ifname",
        "rdzv",
        "host.shm",
        "host.hostname",
        "host.ptrace",
        "env.vars",
    }
    assert required <= set(by_id(report))
    for check in report["checks"]:
        assert set(check) == {"id", "status", "summary", "details", "fix"}
        assert check["status"] in ("ok", "warn", "fail", "skip")
        if check["status"] in ("warn", "fail"):
            assert check["fix"], check


def test_scenario1_down_port_warns_unless_requested(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report = run_env(capsys, SCENARIOS[0])
    devices = by_id(report)["ib.devices"]
    assert code == 0
    assert devices["status"] == "warn"
    assert "NCCL would use 2 RDMA port(s)" not in devices["summary"]
    assert any("mlx5_2:1 is 1: DOWN / 2: Polling" in d for d in devices["details"])
    code, report = run_env(capsys, SCENARIOS[0], "--set", "NCCL_IB_HCA==mlx5_2")
    devices = by_id(report)["ib.devices"]
    assert code == 1 and devices["status"] == "fail"
    assert "matches only ports that are not ACTIVE (mlx5_2:1)" in json.dumps(devices)


def test_scenario1_gid_index_and_peermem(capsys: pytest.CaptureFixture[str]) -> None:
    _, report = run_env(capsys, SCENARIOS[0])
    checks = by_id(report)
    assert checks["ib.gid_index"]["status"] == "ok"
    assert "mlx5_1:1: NCCL uses GID 3, recommended 3" in checks["ib.gid_index"]["summary"]
    assert checks["ib.peermem"]["status"] == "ok"
    assert checks["net.socket_ifname"]["summary"] == "NCCL bootstraps on ib0 (192.168.100.5)"


def test_scenario2_no_subnet_manager_and_missing_uverbs_fail(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_env(capsys, SCENARIOS[1])
    devices = by_id(report)["ib.devices"]
    assert code == 1 and devices["status"] == "fail"
    text = json.dumps(devices)
    assert "no Subnet Manager" in text and "opensm" in text
    assert "/dev/infiniband/uverbs1 (mlx5_1) is missing" in text and "--device=/dev/infiniband" in text
    checks = by_id(report)
    assert checks["ib.peermem"]["status"] == "warn"
    assert checks["host.iommu"]["status"] == "warn" and "DMA-FQ" in checks["host.iommu"]["summary"]
    assert checks["ib.gid_index"]["summary"] == "mlx5_0:1: NCCL uses GID 5, recommended 5"


@pytest.mark.parametrize(
    ("index", "status", "words"),
    [
        ("3", "warn", "IPv6 RoCE v2 GID"),
        ("4", "fail", "RoCE v1 GID"),
        ("0", "fail", "link-local"),
        ("6", "fail", "empty GID slot"),
        ("5", "warn", "NCCL >= 2.21 picks the GID itself"),
    ],
)
def test_scenario2_set_gid_index(capsys: pytest.CaptureFixture[str], index: str, status: str, words: str) -> None:
    _, report = run_env(capsys, SCENARIOS[1], "--set", f"NCCL_IB_GID_INDEX={index}")
    gid = by_id(report)["ib.gid_index"]
    assert gid["status"] == status
    assert words in gid["summary"]
    if index != "5":
        assert "5" in gid["fix"]


def test_scenario2_exclude_list_without_lo_fails_multinode(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, report = run_env(capsys, SCENARIOS[1], "--nnodes", "2", "--set", "NCCL_SOCKET_IFNAME=^=docker0")
    sock = by_id(report)["net.socket_ifname"]
    assert sock["status"] == "fail"
    assert "lo (127.0.0.1)" in sock["summary"] and "drops NCCL's own lo/docker exclusion" in sock["summary"]
    _, report = run_env(capsys, SCENARIOS[1], "--nnodes", "1", "--set", "NCCL_SOCKET_IFNAME=^=docker0")
    assert by_id(report)["net.socket_ifname"]["status"] == "ok"


def test_scenario1_one_char_ifname_is_ignored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, report = run_env(capsys, SCENARIOS[0], "--set", "NCCL_SOCKET_IFNAME=e")
    sock = by_id(report)["net.socket_ifname"]
    assert sock["status"] == "warn" and "ignored" in sock["summary"]
    assert "NCCL sockets (default (ib)): ib0(192.168.100.5)" in sock["details"]


def test_scenario1_ifname_matching_nothing_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report = run_env(capsys, SCENARIOS[0], "--set", "NCCL_SOCKET_IFNAME=ens5")
    sock = by_id(report)["net.socket_ifname"]
    assert code == 1 and sock["status"] == "fail"
    assert "Bootstrap : no socket interface found" in sock["summary"]


@pytest.mark.parametrize(
    ("value", "status", "words"),
    [
        ("mlx5_9", "fail", "names 'mlx5_9', which is not an HCA here"),
        ("mlx5", "fail", "token 'mlx5' is a prefix and selects mlx5_0, mlx5_1, mlx5_2"),
        ("mlx5", "fail", "export NCCL_IB_HCA='=mlx5_0,mlx5_1,mlx5_2'"),
        ("=mlx5_0,=mlx5_1", "fail", "'=' only works once"),
        ("^mlx5", "fail", "leaves no usable RDMA port"),
        ("=mlx5_0:1", "ok", "NCCL would use 1 RDMA port(s): mlx5_0:1"),
    ],
)
def test_ib_hca_syntax(capsys: pytest.CaptureFixture[str], value: str, status: str, words: str) -> None:
    _, report = run_env(capsys, SCENARIOS[0], "--set", f"NCCL_IB_HCA={value}")
    devices = by_id(report)["ib.devices"]
    text = json.dumps(devices)
    assert words in text
    if status == "fail":
        assert devices["status"] == "fail"
    elif status == "warn":
        assert devices["status"] == "warn"
    else:
        # the down mlx5_2 is not requested, so it stays a warning at most
        assert devices["status"] in ("ok", "warn") and "FAIL" not in text


def test_gloo_named_interfaces_must_be_exact(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, report = run_env(capsys, SCENARIOS[0], "--set", "GLOO_SOCKET_IFNAME=eth")
    gloo = by_id(report)["net.gloo"]
    assert gloo["status"] == "fail" and "prefixes work only for NCCL" in gloo["summary"]
    _, report = run_env(capsys, SCENARIOS[0], "--set", "GLOO_SOCKET_IFNAME=eth0")
    assert by_id(report)["net.gloo"]["status"] == "ok"


def test_human_report_prints_fix_and_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["env", "--root", str(scenario(SCENARIOS[1]))])
    out = capsys.readouterr().out
    assert code == 1
    assert "fix: start a subnet manager" in out
    assert "check(s) fail (ib.devices)" in out
