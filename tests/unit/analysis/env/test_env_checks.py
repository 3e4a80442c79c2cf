"""Each env check's passing and failing cases over hand-built snapshots (pure analysis, no I/O)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import SCENARIOS, scenario
from snapshots import LO, bare, check

from ncclcheck.analysis.env.gpus import visible_devices
from ncclcheck.model.checks import Status
from ncclcheck.model.env import EnvOptions
from ncclcheck.probes import gpu, host, ib, net, versions
from ncclcheck.probes.rdzv import RdzvFacts

TORCH_CU121 = versions.Torch("2.3.0+cu121", "/site/torch", "12.1", None, True, True)
GPU = gpu.Gpu("0000:18:00.0", "NVIDIA H100 80GB HBM3", 0, None, True)


def with_gpus(n: int, env: dict[str, str] | None = None, **options: object) -> object:
    gpus = tuple(dataclasses.replace(GPU, bdf=f"0000:{0x18 + i:02x}:00.0") for i in range(n))
    snap = bare(env, gpu=gpu.GpuFacts(gpus, True, "550.54.15"))
    return dataclasses.replace(snap, options=EnvOptions(**options))  # type: ignore[arg-type]


def with_versions(**fields: object) -> object:
    base = versions.VersionFacts("3.11.7", "Linux", TORCH_CU121, None, None, (), "550.54.15", 12040)
    return bare(versions=dataclasses.replace(base, **fields))  # type: ignore[arg-type]


def test_versions_reports_the_library_that_loads() -> None:
    lib = versions.NcclLib("/site/nvidia/nccl/lib/libnccl.so.2", "nvidia-nccl wheel", 22105, None)
    result = check(with_versions(nccl_libs=(lib,), nccl_wheel="nvidia-nccl-cu12==2.21.5"), "versions")
    assert result.status is Status.OK
    assert "NCCL 2.21.5" in result.summary


def test_versions_runtime_nccl_differs_from_wheel() -> None:
    preload = versions.NcclLib("/opt/nccl/libnccl.so.2", "LD_PRELOAD", 21805, None)
    result = check(with_versions(nccl_libs=(preload,), nccl_wheel="nvidia-nccl-cu12==2.21.5"), "versions")
    assert result.status is Status.WARN
    assert "runtime NCCL 2.18.5 (LD_PRELOAD) differs" in result.summary


def test_versions_driver_too_old_for_cuda() -> None:
    torch13 = dataclasses.replace(TORCH_CU121, cuda="13.0")
    result = check(with_versions(torch=torch13, driver_version="535.104.05"), "versions")
    assert result.status is Status.FAIL
    assert "needs driver >= 580" in result.summary


def test_versions_without_torch_warns_with_fix() -> None:
    result = check(bare(), "versions")
    assert result.status is Status.WARN and "pip install ncclcheck" in result.fix


@pytest.mark.parametrize(
    ("value", "count", "problem"),
    [
        (None, 4, None),
        ("0,1", 2, None),
        ("", 0, "empty"),
        ("-1", 0, "not a GPU"),
        ("0,5,1", 1, "entries from it on are hidden"),
        ("0,0", 1, "twice"),
        ("GPU-8a1b,MIG-77", 2, None),
    ],
)
def test_cuda_visible_devices_semantics(value: str | None, count: int, problem: str | None) -> None:
    visible = visible_devices(value, 4)
    assert visible.count == count
    assert (problem is None) == (visible.problem is None)
    if problem:
        assert problem in (visible.problem or "")


def test_gpus_more_ranks_than_gpus_fails_and_fitting_passes() -> None:
    assert check(with_gpus(4, nproc=8), "gpus").status is Status.FAIL
    assert check(with_gpus(4, {"CUDA_VISIBLE_DEVICES": "0,1"}, nproc=4), "gpus").status is Status.FAIL
    ok = check(with_gpus(4, nproc=4), "gpus")
    assert ok.status is Status.OK and ok.summary == "4 GPU(s), 4 visible, 4 local rank(s)"


def test_gpus_local_rank_beyond_visible() -> None:
    result = check(with_gpus(8, {"CUDA_VISIBLE_DEVICES": "3", "LOCAL_RANK": "3"}), "gpus")
    assert result.status is Status.FAIL and "invalid device ordinal" in result.summary


def test_gpus_driver_not_loaded_and_none_present() -> None:
    snap = bare(gpu=gpu.GpuFacts((GPU,), False, None))
    assert check(snap, "gpus").status is Status.FAIL
    assert check(bare(), "gpus").status is Status.SKIP


def _shm(size: int, free: int) -> host.Shm:
    return host.Shm("/dev/shm", True, True, size, free, "tmpfs", (host.ShmSegment("nccl-AbC123", 40 << 20),))


def test_shm_docker_default_with_several_ranks_fails() -> None:
    snap = dataclasses.replace(
        bare(), host=dataclasses.replace(bare().host, shm=_shm(64 << 20, 60 << 20)), options=EnvOptions(nproc=2)
    )
    result = check(snap, "host.shm")
    assert result.status is Status.FAIL and "--shm-size" in result.fix


def test_shm_nearly_full_names_stale_segments() -> None:
    snap = dataclasses.replace(bare(), host=dataclasses.replace(bare().host, shm=_shm(8 << 30, 1 << 28)))
    result = check(snap, "host.shm")
    assert result.status is Status.WARN and "nccl-AbC123" in result.summary


def test_shm_missing_fails() -> None:
    missing = host.Shm("/dev/shm", False, False, None, None, None, ())
    assert (
        check(dataclasses.replace(bare(), host=dataclasses.replace(bare().host, shm=missing)), "host.shm").status
        is Status.FAIL
    )


@pytest.mark.parametrize(
    ("ptrace", "status", "words"),
    [
        (host.Ptrace(0, False, 1000, "/usr/bin/py-spy", None), Status.OK, ""),
        (host.Ptrace(1, False, 1000, "/usr/bin/py-spy", None), Status.WARN, "ptrace_scope=0"),
        (host.Ptrace(1, True, 0, "/usr/bin/py-spy", None), Status.OK, ""),
        (host.Ptrace(3, True, 0, "/usr/bin/py-spy", None), Status.WARN, "reboot"),
        (host.Ptrace(None, False, 0, "/usr/bin/py-spy", "docker"), Status.WARN, "--cap-add SYS_PTRACE"),
        (host.Ptrace(0, True, 0, None, None), Status.WARN, "pip install py-spy"),
    ],
)
def test_ptrace(ptrace: host.Ptrace, status: Status, words: str) -> None:
    result = check(dataclasses.replace(bare(), host=dataclasses.replace(bare().host, ptrace=ptrace)), "host.ptrace")
    assert result.status is status
    assert words in result.fix


def _with_ib(memlock: host.Memlock, env: dict[str, str] | None = None) -> object:
    facts = ib.collect(str(scenario(SCENARIOS[0])))
    snap = bare(env, ib=facts)
    return dataclasses.replace(snap, host=dataclasses.replace(snap.host, memlock=memlock))


@pytest.mark.parametrize(
    ("memlock", "status"),
    [
        (host.Memlock(-1, -1, False), Status.OK),
        (host.Memlock(8 << 20, 8 << 20, True), Status.OK),
        (host.Memlock(8 << 20, 8 << 20, False), Status.WARN),
        (host.Memlock(64 << 10, 64 << 10, False), Status.FAIL),
    ],
)
def test_memlock(memlock: host.Memlock, status: Status) -> None:
    assert check(_with_ib(memlock), "ib.memlock").status is status


def test_memlock_skipped_without_rdma_or_with_ib_disabled() -> None:
    assert check(bare(), "ib.memlock").status is Status.SKIP
    tight = host.Memlock(64 << 10, 64 << 10, False)
    assert check(_with_ib(tight, {"NCCL_IB_DISABLE": "1"}), "ib.memlock").status is Status.SKIP


def test_hostname_resolving_to_loopback_fails_only_multinode() -> None:
    loop = host.Hostname("node1", (host.HostAddr("127.0.1.1", True),), None, ("127.0.1.1 node1",), None)
    snap = dataclasses.replace(bare(), host=dataclasses.replace(bare().host, hostname=loop))
    assert check(snap, "host.hostname").status is Status.WARN
    multi = dataclasses.replace(snap, options=EnvOptions(nnodes=2))
    assert check(multi, "host.hostname").status is Status.FAIL
    gloo = check(multi, "net.gloo")
    assert (
        gloo.status is Status.FAIL
        and "127.0.1.1" in gloo.summary
        and "GLOO_SOCKET_IFNAME=<interface> (e.g. eth0)" in gloo.fix
    )
    single = dataclasses.replace(snap, options=EnvOptions(nnodes=1))
    assert check(single, "host.hostname").status is Status.OK
    assert check(bare(), "host.hostname").status is Status.OK


def test_only_loopback_interfaces() -> None:
    snap = dataclasses.replace(bare(), net=dataclasses.replace(bare().net, ifaddrs=(LO,)))
    assert check(snap, "net.interfaces").status is Status.WARN
    assert check(dataclasses.replace(snap, options=EnvOptions(nnodes=2)), "net.interfaces").status is Status.FAIL
    assert check(bare(), "net.interfaces").summary.endswith("routable: eth0")


def test_multi_node_inferred_from_launcher_variables() -> None:
    loop = host.Hostname("node1", (host.HostAddr("127.0.0.1", True),), None, (), None)
    snap = bare({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"})
    snap = dataclasses.replace(snap, host=dataclasses.replace(snap.host, hostname=loop))
    assert check(snap, "host.hostname").status is Status.FAIL


def test_rank_variable_sanity() -> None:
    result = check(bare({"RANK": "4", "WORLD_SIZE": "4", "MASTER_PORT": "29500"}), "rdzv")
    assert result.status is Status.FAIL
    assert "RANK=4 is not below WORLD_SIZE=4" in "\n".join((result.summary, *result.details))
    assert "MASTER_ADDR expected, but not set" in "\n".join((result.summary, *result.details))


def test_an_hca_asked_for_on_a_node_without_rdma_is_said() -> None:
    result = check(bare({"NCCL_IB_HCA": "mlx5_9"}), "ib.devices")
    assert result.status is Status.WARN and "NCCL_IB_HCA=mlx5_9 but this node has no RDMA device" in result.summary
    assert check(bare({}), "ib.devices").status is Status.SKIP


def _rdzv(addr: str, resolved: tuple[str, ...], error: str | None = None, port: int | None = None) -> RdzvFacts:
    return RdzvFacts(
        addr, port, resolved, error, False, resolved[0] if resolved else None, False, None, "ok" if port else None
    )


def test_an_unresolvable_master_addr_is_a_failure_without_a_master_port() -> None:
    snapshot = bare({"MASTER_ADDR": "nohost.invalid"}, rdzv=_rdzv("nohost.invalid", (), "Name or service not known"))
    result = check(snapshot, "rdzv")
    assert result.status is Status.FAIL and "MASTER_ADDR=nohost.invalid does not resolve" in result.summary


def test_a_bad_port_and_an_unresolvable_address_are_two_failures() -> None:
    env = {"MASTER_ADDR": "nohost.invalid", "MASTER_PORT": "http"}
    result = check(bare(env, rdzv=_rdzv("nohost.invalid", (), "Name or service not known")), "rdzv")
    text = result.summary + " ".join(result.details)
    assert result.status is Status.FAIL
    assert "MASTER_PORT=http is not a TCP port" in text and "MASTER_ADDR=nohost.invalid does not resolve" in text


def test_a_remote_master_without_a_port_is_not_called_unreachable() -> None:
    result = check(bare({"MASTER_ADDR": "10.1.0.9"}, rdzv=_rdzv("10.1.0.9", ("10.1.0.9",))), "rdzv")
    assert result.status is Status.OK and "MASTER_PORT unset" in result.summary


def test_a_torch_that_does_not_import_is_a_failure() -> None:
    torch = versions.Torch("2.4.0", "/env/torch", "12.1", None, True, True)
    facts = versions.VersionFacts(
        "3.11.7",
        "Linux",
        torch,
        None,
        None,
        (),
        None,
        None,
        "ImportError: libcudart.so.12: cannot open shared object file",
    )
    result = check(bare({}, versions=facts), "versions")
    assert result.status is Status.FAIL and "is installed but does not import here: ImportError" in result.summary
    imported = dataclasses.replace(facts, torch_import_error=None)
    assert check(bare({}, versions=imported), "versions").status is not Status.FAIL


def test_an_import_left_out_by_the_user_is_said_not_tried_and_nothing_else_is() -> None:
    torch = versions.Torch("2.4.0", "/env/torch", "12.1", None, True, True)
    facts = versions.VersionFacts("3.11.7", "Linux", torch, None, None, (), None, None, None)
    left_out = check(bare({}, versions=facts, options=EnvOptions(try_import=False)), "versions")
    assert "import torch.distributed: not tried (--no-import)" in left_out.details
    assert left_out.status is not Status.FAIL
    tried = check(bare({}, versions=facts), "versions")  # imported fine: nothing said of it
    assert not any("not tried" in d for d in tried.details)
    saved = check(bare({}, versions=facts, options=EnvOptions(root="/tree", try_import=False)), "versions")
    assert not any("not tried" in d for d in saved.details)  # a saved tree is never imported: nothing to say


@pytest.mark.parametrize("name", ["weave0", "ip6tnl0", "docker0", "vxlan.calico"])
def test_env_and_logs_judge_interfaces_by_one_list(name: str) -> None:
    """What env warns NCCL would pick, logs warns NCCL did pick (they disagreed on weave, ip6tnl, vxlan)."""
    from ncclcheck.analysis.logs.diagnose import analyse
    from ncclcheck.analysis.logs.frame import frame_all

    lines = [
        f"node1:1234:1234 [0] NCCL INFO Bootstrap : Using {name}:10.32.0.1<0>",
        "node1:1234:1234 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 - Init COMPLETE",
    ]
    assert [f.id for f in analyse(frame_all(lines, "x.log")).findings] == ["suspicious-interface"]
    only = net.IfAddr(name, "AF_INET", "10.32.0.1", "255.255.0.0", ("UP", "BROADCAST", "RUNNING"))
    snapshot = dataclasses.replace(bare(), net=dataclasses.replace(bare().net, ifaddrs=(LO, only)))
    assert "a bridge/overlay interface" in check(snapshot, "net.socket_ifname").summary


def test_gpus_as_nvml_reads_them_ecc_fails_a_slowdown_warns_and_no_driver_is_said() -> None:
    from ncclcheck.model.gpu import GpuLook, GpuReading

    def reading(index: int, **fields: object) -> GpuReading:
        base = GpuReading(index, "NVIDIA H100 80GB HBM3", 0, 70.0, 700.0, 345, 1980, 1 << 30, 80 << 30, ())
        return dataclasses.replace(base, **fields)  # type: ignore[arg-type]

    def with_nvml(look: GpuLook) -> object:
        return dataclasses.replace(with_gpus(2, nproc=2), nvml=look)  # type: ignore[type-var]

    healthy = check(with_nvml(GpuLook(0.0, (reading(0), reading(1)))), "gpus")  # type: ignore[arg-type]
    assert healthy.status is Status.OK
    assert (
        "GPU 1 NVIDIA H100 80GB HBM3: 0 % busy, 70 W of 700 W, SM 345/1980 MHz, memory 1024/81920 MiB"
        in healthy.details
    )
    ecc = check(with_nvml(GpuLook(0.0, (reading(0), reading(1, ecc_uncorrected=3)))), "gpus")  # type: ignore[arg-type]
    assert ecc.status is Status.FAIL and "GPU 1 reports 3 uncorrected ECC error(s)" in ecc.summary
    hot = check(with_nvml(GpuLook(0.0, (reading(0, reasons=("hardware thermal slowdown",)), reading(1)))), "gpus")  # type: ignore[arg-type]
    assert hot.status is Status.WARN and "held down (hardware thermal slowdown)" in hot.summary
    capped = check(with_nvml(GpuLook(0.0, (reading(0, reasons=("application clocks setting",)), reading(1)))), "gpus")  # type: ignore[arg-type]
    assert capped.status is Status.OK  # a setting, not a slowdown: said in the details only
    missing = check(with_nvml(GpuLook(0.0, error="no NVIDIA driver to ask (NVML: Library Not Found)")), "gpus")  # type: ignore[arg-type]
    assert missing.status is Status.OK and "NVML: no NVIDIA driver to ask (NVML: Library Not Found)" in missing.details


def test_a_torch_import_broken_by_a_variable_names_the_variable_not_the_install() -> None:
    """The error text is what ``import torch.distributed`` printed under TORCH_DISTRIBUTED_DEBUG=FULL
    (torch 2.13: torch/distributed/__init__.py, set_debug_level_from_env())."""
    torch = versions.Torch("2.13.0", "/env/torch", "12.8", None, True, True)
    error = "ValueError: The value of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO, or DETAIL."
    facts = versions.VersionFacts("3.11.7", "Linux", torch, None, None, (), None, None, error)
    result = check(bare({"TORCH_DISTRIBUTED_DEBUG": "FULL"}, versions=facts), "versions")
    assert result.status is Status.FAIL
    assert "because of TORCH_DISTRIBUTED_DEBUG=FULL" in result.summary
    assert "unset TORCH_DISTRIBUTED_DEBUG" in result.fix and "reinstall" not in result.fix
    # Must not: a variable that is set but not named by the error is not blamed; the install is.
    other = check(
        bare(
            {"TORCH_DISTRIBUTED_DEBUG": "INFO"},
            versions=dataclasses.replace(
                facts, torch_import_error=("ImportError: libcudart.so.12: cannot open shared object file")
            ),
        ),
        "versions",
    )
    assert other.status is Status.FAIL and "because of" not in other.summary and "reinstall torch" in other.fix


@pytest.mark.parametrize(
    ("connect", "status", "words"),
    [
        ("ok", Status.OK, "something listens on port 29533"),
        ("ECONNREFUSED", Status.WARN, "connection refused"),
        ("timeout", Status.FAIL, "timed out, no answer"),
        ("ENETUNREACH", Status.FAIL, "no route to the host"),
        ("EHOSTUNREACH", Status.FAIL, "no route to the host"),
    ],
)
def test_a_remote_master_says_what_the_connect_found(connect: str, status: Status, words: str) -> None:
    facts = RdzvFacts("10.1.0.9", 29533, ("10.1.0.9",), None, False, "10.1.0.5", False, None, connect, 29533)
    result = check(bare({"MASTER_ADDR": "10.1.0.9", "MASTER_PORT": "29533"}, rdzv=facts), "rdzv")
    assert result.status is status, result
    assert words in result.summary
    if connect != "ok":  # must not: a remote node passed as fine when nothing was found listening
        assert "something listens" not in result.summary
