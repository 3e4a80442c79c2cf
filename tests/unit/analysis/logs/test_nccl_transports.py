"""The NCCL log parser shared by ``smoke`` and ``logs``: per-rank transport maps from real NCCL log text."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.frame import frame, frame_all
from ncclcheck.analysis.logs.nccl import ranks
from ncclcheck.model.logs import RankLog, peer_map

LOGS = FIXTURES / "nccl_logs"


def parse(prefix: str) -> dict[int | None, RankLog]:
    if not LOGS.is_dir():
        pytest.fail(f"fixture missing: {LOGS}")
    (path,) = LOGS.glob(f"{prefix}_*.log")
    with path.open(encoding="utf-8", errors="replace") as handle:
        return {r.rank: r for r in ranks(frame_all(handle, path.name))}


def test_single_node_p2p_with_intra_node_traffic_through_the_nic() -> None:
    logs = parse("01")
    assert peer_map(logs[0]) == {1: ("P2P/IPC",), 7: ("NET/IB/0/GDRDMA",)}
    assert peer_map(logs[3]) == {4: ("NET/IB/0/GDRDMA",)}
    assert logs[6].network == "IB" and logs[6].net_devices[0] == "mlx5_0:1/RoCE"
    assert logs[6].bootstrap == ("ens5f0np0(192.168.89.206)",)
    assert {r.host for r in logs.values()} == {"node17-2"}


def test_plugin_transport_and_cumem() -> None:
    logs = parse("02")
    assert peer_map(logs[4]) == {3: ("NET/IBext_v8/0/GDRDMA",)}  # rank inferred from "[receive]" lines
    assert peer_map(logs[1]) == {2: ("P2P/CUMEM",)}


def test_socket_only_cluster_with_env_echo_and_versions() -> None:
    logs = parse("11")
    worker = logs[1]
    assert worker.network == "Socket" and worker.socket_interfaces == ("eno2(10.42.0.2)",)
    assert dict(worker.env) == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "en"}
    assert {r.nccl_version for r in logs.values()} == {"2.25.1+cuda12.4", "2.25.1+cuda12.1"}


def test_old_format_without_header() -> None:
    (log,) = parse("10").values()
    assert log.nccl_version == "2.5.7+cuda10.0" and log.net_devices == ("mlx5_0:1/RoCE",)
    assert peer_map(log) == {1: ("P2P/IPC",), 7: ("direct shared memory",), 15: ("NET/IB/0",)}


def test_prefixes_are_stripped_and_ranks_kept() -> None:
    line = frame("[1,3]<stdout>:smc-gpu-03:29881:30401 [0] NCCL INFO init.cc:903 -> 5", "f", 1)
    assert (line.host, line.pid, line.dev, line.level, line.rank) == ("smc-gpu-03", "29881", 0, "INFO", 3)
    line = frame("  | 2024-11-28T07:42:14.532Z | algo-1:17773:17846 [0] NCCL INFO Connected all rings", "f", 2)
    assert line.host == "algo-1" and line.text == "Connected all rings"
    line = frame("\x1b[0m[rank7]:[E1206 18:44:16.99 ProcessGroupNCCL.cpp:1709] boom\r\n", "f", 3)
    assert line.rank == 7 and line.text.startswith("[E1206") and not line.nccl
