"""``ncclcheck smoke`` end to end on real torchrun processes with gloo: pass, drills, no orphans."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import REPO

from ncclcheck.analysis.smoke.plan import OPS
from ncclcheck.cli import main
from ncclcheck.collectors.progress import read_progress

pytestmark = pytest.mark.integration

QUICK = ["--backend", "gloo", "--sizes", "8:2K", "--iters", "2", "--warmup", "0"]


def smoke(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "report.json"
    code = main(["smoke", *QUICK, "--log-dir", str(tmp_path / "logs"), "--json", str(out), *args])
    return code, json.loads(out.read_text())


def no_orphans() -> None:
    # Under pytest-xdist another worker's smoke run may be alive: ours carry this worker's temp dir in their
    # --log-dir (every test here gives one under tmp_path), theirs carry their own.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    mine = f"popen-{worker}{os.sep}" if worker else ""
    leftovers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "ncclcheck.smoke" in " ".join(p.info["cmdline"] or []) and mine in " ".join(p.info["cmdline"] or [])
    ]
    assert not leftovers, leftovers


@pytest.mark.parametrize("nproc", [2, 4])
def test_every_op_verified(tmp_path: Path, nproc: int) -> None:
    code, report = smoke(tmp_path, "--nproc", str(nproc))
    assert code == 0, report
    assert report["schema"] == "ncclcheck.smoke/1" and report["verdict"] == "pass"
    assert report["world_size"] == nproc and report["hang"] is None
    assert {r["op"] for r in report["results"]} == set(OPS)
    assert all(r["status"] == "ok" and r["wrong"] == 0 for r in report["results"])
    no_orphans()


def test_hang_drill_names_the_culprit_and_stacks(tmp_path: Path) -> None:
    code, report = smoke(
        tmp_path, "--nproc", "2", "--ops", "broadcast,all_reduce", "--timeout", "4", "--drill", "hang@1:all_reduce"
    )
    assert code == 1 and report["verdict"] == "fail"
    hang = report["hang"]
    assert hang["op"] == "all_reduce" and hang["culprits"] == [1]
    assert hang["ranks"]["0"]["state"] == "in_collective" and hang["ranks"]["0"]["collective"] == "all_reduce"
    assert hang["ranks"]["1"]["state"] == "not_in_collective"
    assert "drill_hang" in hang["ranks"]["1"]["call_site"]
    assert any("all_reduce" in line for line in hang["ranks"]["0"]["stack"])
    assert [r["status"] for r in report["results"] if r["op"] == "all_reduce"] == ["hang"]
    assert all(r["status"] == "ok" for r in report["results"] if r["op"] == "broadcast")
    no_orphans()


def test_a_hang_written_without_a_terminal_says_which_rank_stands_still(tmp_path: Path) -> None:
    """A CI log of a hang: while rank 1 sits in the drill, lines say it stands still and for how long of the
    --timeout, not only the last result for the whole wait."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ncclcheck",
            "smoke",
            *QUICK,
            "--nproc",
            "3",
            "--ops",
            "broadcast,all_reduce",
            "--timeout",
            "6",
            "--drill",
            "hang@1:all_reduce",
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    still = [line for line in done.stdout.splitlines() if "standing still" in line]
    assert any(
        "rank 1 standing still" in line and "s of 6 s held by a drill before all_reduce" in line for line in still
    )
    assert any("rank 0,2 standing still" in line and "in all_reduce 8B" in line for line in still), still
    no_orphans()


def test_crash_drill_names_the_rank_that_failed_first(tmp_path: Path) -> None:
    # Ranks 0 and 1 fail too, within the same second, as echoes; torchrun's "first observed
    # failure" would name rank 0. The rank named must be the one that raised first.
    code, report = smoke(tmp_path, "--nproc", "3", "--ops", "broadcast,all_reduce", "--drill", "crash@2:all_reduce")
    assert code == 1
    assert report["hang"] is None
    (finding,) = report["findings"]
    assert finding["ranks"] == [2]
    assert finding["message"] == (
        "rank 2 died (exit code 1) during all_reduce: RuntimeError: ncclcheck drill: rank 2 crashed at all_reduce"
    )
    assert "/2/stderr.log" in finding["fix"]
    assert [r["status"] for r in report["results"] if r["op"] == "all_reduce"] == ["error"]
    no_orphans()


def test_killed_rank_is_named_with_its_signal_and_the_oom_hint(tmp_path: Path) -> None:
    # torchrun stops the other ranks with SIGTERM: they are not the cause.
    code, report = smoke(tmp_path, "--nproc", "3", "--ops", "all_reduce", "--drill", "kill@1:all_reduce")
    assert code == 1
    (finding,) = report["findings"]
    assert finding["ranks"] == [1] and finding["message"].startswith("rank 1 died (signal SIGKILL) during all_reduce")
    assert "OOM killer" in finding["fix"]
    no_orphans()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--drill", "explode@1:all_reduce"], "unknown kind explode; choose from hang, crash, kill, mismatch"),
        # the op misspelt: the op is named, with the ops a drill can take, never the kind
        (["--drill", "hang@1:allreduce"], "unknown op allreduce; choose from broadcast, reduce, all_reduce,"),
        (["--drill", "hang-1-all_reduce"], "expected KIND@RANK:OP, e.g. hang@1:all_reduce"),
        (["--ops", "allreduce"], "unknown op(s) allreduce"),
        (["--nodes", "2"], "needs --master-addr"),
        (["--sizes", "big"], "'big' is not a size"),
        # drills that could never fire
        (["--nproc", "2", "--drill", "hang@5:all_reduce"], "there is no rank 5 (ranks 0..1)"),
        (["--nproc", "2", "--ops", "broadcast", "--drill", "hang@1:all_reduce"], "all_reduce is not in --ops"),
        (["--nproc", "1", "--drill", "mismatch@0:all_reduce"], "mismatch needs at least 2 ranks"),
        # values that were silently replaced or disabled the watchdog
        (["--nproc", "0"], "--nproc 0: run at least one rank"),
        (["--nodes", "0"], "--nodes 0: a job has at least one node"),
        (["--timeout", "nan"], "--timeout nan"),
        (["--timeout", "inf"], "--timeout inf"),
        (["--timeout", "0"], "--timeout 0.0"),
        (["--sizes", "0"], "0 is not a whole number of float32 elements"),
        (["--sizes", "3"], "3 is not a whole number of float32 elements"),
        (["--sizes", "5:5"], "5 is not a whole number of float32 elements"),
        (["--sizes", ","], "no size given"),
        (["--master-port", "70000"], "--master-port 70000 is not a port"),
    ],
)
def test_usage_errors(capsys: pytest.CaptureFixture[str], args: list[str], words: str) -> None:
    assert main(["smoke", "--backend", "gloo", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("name", "value"), [("SLURM_NNODES", "two"), ("SLURM_NODEID", "1.0")])
def test_a_slurm_variable_that_is_not_a_number_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    assert main(["smoke", "--backend", "gloo"]) == 2
    err = capsys.readouterr().err
    assert f"${name}={value!r} is not a whole number" in err and "Traceback" not in err


def test_help_shows_every_default() -> None:
    done = subprocess.run([sys.executable, "-m", "ncclcheck", "smoke", "--help"], capture_output=True, text=True)
    text = " ".join(done.stdout.split())
    for default in (
        "(default: 8:1M)",
        "(default: 5)",
        "(default: 1)",
        "(default: 30.0)",
        "free port torchrun picks",
        "(default: ./ncclcheck-logs/smoke-TIME-nodeN)",
        "(default: all)",
        "(default: none)",
    ):
        assert default in text, default


def test_sizes_reach_the_max_asked_for_and_warmup_zero_is_none() -> None:
    from ncclcheck.analysis.smoke.plan import parse_sizes

    assert parse_sizes("8:16M")[-1] == 16 << 20 and parse_sizes("8:16M")[:3] == (8, 32, 128)
    assert parse_sizes("8:32") == (8, 32) and parse_sizes("4K") == (4096,)
    worker = REPO / "ncclcheck" / "smoke" / "worker.py"
    assert "range(plan.warmup)" in worker.read_text()


def wait_for(predicate: Callable[[], Any], what: str, deadline_s: float = 90.0) -> Any:
    """Poll until ``predicate`` returns something truthy; fail with ``what`` after the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def rank_in(log_dir: Path, rank: int, op: str) -> int | None:
    """The pid of ``rank`` once it has started ``op``."""
    for r in read_progress(str(log_dir)):
        if r.rank == rank and r.last_event == "start" and r.last_op == op and r.pid:
            return r.pid
    return None


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGSTOP, "hang"), (signal.SIGKILL, "error")])
def test_stopped_or_killed_rank_is_caught(tmp_path: Path, sig: signal.Signals, status: str) -> None:
    """A rank frozen or killed in the middle of a long all_reduce step is named, and nothing is left behind."""
    out, logs = tmp_path / "report.json", tmp_path / "logs"
    long_step = ["--ops", "all_reduce", "--sizes", "8", "--iters", "1000000", "--timeout", "3"]
    cmd = [sys.executable, "-m", "ncclcheck", "smoke", "--backend", "gloo", "--nproc", "2", *long_step]
    proc = subprocess.Popen([*cmd, "--log-dir", str(logs), "--json", str(out)], stdout=subprocess.DEVNULL)
    try:
        pid = wait_for(lambda: rank_in(logs, 1, "all_reduce"), "rank 1 to start all_reduce")
        os.kill(pid, sig)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    report = json.loads(out.read_text())
    assert code == 1 and report["verdict"] == "fail"
    assert [r["status"] for r in report["results"]] == [status]
    if sig == signal.SIGSTOP:
        assert report["hang"]["culprits"] == [1] and report["hang"]["op"] == "all_reduce"
        assert report["hang"]["ranks"]["1"]["state"] == "stopped"
        assert report["hang"]["ranks"]["0"]["state"] == "in_collective"
    else:
        died = next(f for f in report["findings"] if f["id"] == "rank-died")
        assert died["ranks"] == [1] and "signal SIGKILL" in died["message"] and "all_reduce" in died["message"]
    no_orphans()


def test_runs_as_a_worker_under_the_users_torchrun(tmp_path: Path) -> None:
    """``torchrun ... -m ncclcheck.smoke``: the ranks run the plan and rank 0 prints and saves the job report."""
    logs = tmp_path / "logs"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "ncclcheck.smoke"]
    cmd += ["--sizes", "8:32", "--iters", "2", "--ops", "all_reduce,all_gather", "--log-dir", str(logs)]
    env = {k: v for k, v in os.environ.items() if k != "NCCLCHECK_LOG_DIR"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "results verified" in done.stdout and "all_gather" in done.stdout
    report = json.loads((logs / "report.json").read_text())
    assert report["verdict"] == "pass" and report["world_size"] == 2
    assert [(r["op"], r["bytes"]) for r in report["results"]] == [
        ("all_reduce", 8),
        ("all_reduce", 32),
        ("all_gather", 8),
        ("all_gather", 32),
    ]


def test_unknown_flag_names_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["smoke", "--nprocs", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "ncclcheck smoke: unrecognized arguments: --nprocs 2 (see ncclcheck smoke --help)"


def test_mismatch_drill_names_the_rank_in_the_other_collective(tmp_path: Path) -> None:
    code, report = smoke(
        tmp_path, "--nproc", "2", "--ops", "broadcast,all_reduce", "--timeout", "4", "--drill", "mismatch@1:all_reduce"
    )
    assert code == 1
    hang = report["hang"]
    assert hang["op"] == "all_reduce" and hang["culprits"] == [1]
    assert hang["ranks"]["1"]["state"] == "wrong_collective" and hang["ranks"]["1"]["collective"] == "all_gather"
    assert hang["ranks"]["0"]["collective"] == "all_reduce"
    assert "rank 1 called all_gather instead" in hang["message"]
    no_orphans()


def test_slurm_variables_give_the_node_shape(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLURM_NNODES", "2")
    monkeypatch.setenv("SLURM_NODEID", "3")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu-[07-08]")
    assert main(["smoke", "--backend", "gloo"]) == 2
    assert "--node-rank 3 is not in 0..1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("nodelist", "first"), [("gpu-[07-08]", "gpu-07"), ("a1,a2", "a1"), ("n[1,3-4]", "n1"), ("solo", "solo")]
)
def test_slurm_master_is_the_first_node(nodelist: str, first: str) -> None:
    from ncclcheck.commands.smoke.settings import slurm_master

    assert slurm_master(nodelist) == first


def test_unresolvable_rendezvous_is_a_launch_failure(tmp_path: Path) -> None:
    args = ["--nproc", "1", "--nodes", "2", "--node-rank", "1", "--master-addr", "no-such-host.invalid"]
    code, report = smoke(tmp_path, *args)
    assert code == 3 and report["verdict"] == "fail"
    (finding,) = report["findings"]
    assert finding["id"] == "launch-failed" and "no-such-host.invalid:29400 does not resolve" in finding["message"]
    assert "ncclcheck env --master-addr no-such-host.invalid" in finding["fix"]


def test_rendezvous_nobody_serves_is_a_launch_failure(tmp_path: Path) -> None:
    """Node 1 of 2 whose node 0 never comes: after the deadline, exit 3 naming the endpoint (no dumps, no hang)."""
    args = ["--nproc", "1", "--nodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", "29541"]
    code, report = smoke(tmp_path, *args, "--timeout", "1")
    assert code == 3 and report["hang"] is None
    assert report["findings"][0]["id"] == "launch-failed" and "127.0.0.1:29541" in report["findings"][0]["message"]
    no_orphans()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_smoke_ends_every_rank_and_keeps_what_was_seen(tmp_path: Path, sig: int) -> None:
    """^C, `timeout`, `kill` or a CI cancel during a hang: smoke ends its whole tree (ranks in their own sessions
    too), prints the partial table and leaves the partial JSON, marked interrupted; while it ran, the JSON said
    running, never fail."""
    out = tmp_path / "report.json"
    cmd = [
        sys.executable,
        "-m",
        "ncclcheck",
        "smoke",
        *QUICK,
        "--nproc",
        "2",
        "--timeout",
        "600",
        "--json",
        str(out),
        "--drill",
        "hang@1:all_reduce",
        "--log-dir",
        str(tmp_path / "logs"),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tree = psutil.Process(proc.pid)
    left: list[psutil.Process] = []  # torchrun and the ranks, seen while they ran: ended here if the test fails

    def hung() -> bool:
        ranks = read_progress(str(tmp_path / "logs"))
        return len([r for r in ranks if r.pid]) == 2 and any(r.last_op == "all_reduce" for r in ranks)

    try:
        wait_for(lambda: proc.poll() is not None or hung(), "the hang drill to reach all_reduce", 120)
        assert proc.poll() is None
        wait_for(lambda: out.exists() and json.loads(out.read_text())["results"], "a result in the JSON")
        running = json.loads(out.read_text())
        assert running["verdict"] == "running" and running["state"] == "running"
        ranks = [r.pid for r in read_progress(str(tmp_path / "logs")) if r.pid]
        left += tree.children(recursive=True) + [psutil.Process(pid) for pid in ranks if psutil.pid_exists(pid)]
        proc.send_signal(sig)
        stdout, err = proc.communicate(timeout=90)
    finally:  # a failure here must not leave a hung job behind for the tests after it
        if proc.poll() is None:
            for child in [*left, *tree.children(recursive=True), tree]:
                with contextlib.suppress(psutil.Error):
                    child.kill()
            proc.wait()
    assert proc.returncode == 128 + sig and "every rank ended" in err, err
    assert not [pid for pid in ranks if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    no_orphans()
    report = json.loads(out.read_text())
    assert report["verdict"] == "interrupted" and report["state"] == "interrupted"
    assert {r["op"] for r in report["results"]} >= {"broadcast", "reduce"}
    assert "all_reduce" not in {r["op"] for r in report["results"]}
    assert "interrupted: no verdict" in stdout and "broadcast" in stdout and "✓ pass" not in stdout


def test_a_reused_log_dir_never_mixes_in_the_previous_run(tmp_path: Path) -> None:
    """The second run into the same --log-dir gets a directory of its own: its report is its own results only."""
    logs = tmp_path / "logs"
    first = main(["smoke", *QUICK, "--nproc", "2", "--ops", "all_gather", "--log-dir", str(logs)])
    out = tmp_path / "second.json"
    second = main(["smoke", *QUICK, "--nproc", "2", "--ops", "broadcast", "--log-dir", str(logs), "--json", str(out)])
    report = json.loads(out.read_text())
    assert (first, second) == (0, 0)
    assert {r["op"] for r in report["results"]} == {"broadcast"}
    assert report["log_dir"] != str(logs) and Path(report["log_dir"]).parent == logs
    assert (logs / "progress").is_dir()  # the first run's files are left where they were
    no_orphans()


def test_a_taken_port_is_named_as_the_reason_the_ranks_never_started(tmp_path: Path) -> None:
    """--master-port on one node is used; when another process holds it, torchrun's own words say why."""
    import socket

    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code, report = smoke(tmp_path, "--nproc", "1", "--master-port", str(port), "--timeout", "5")
    assert code == 3 and report["hang"] is None
    (finding,) = [f for f in report["findings"] if f["id"] == "launch-failed"]
    assert f"port {port} is already taken" in finding["message"] and "ss -ltnp" in finding["fix"]
    assert "rendezvous" not in finding["message"].split(":")[0]  # not blamed on a rendezvous nobody serves
    no_orphans()


def test_each_result_once_barrier_without_a_size_and_the_hung_size(tmp_path: Path) -> None:
    """Without a terminal: a line per op, then the table; the barrier row has no size; a hung row shows the
    size that hung."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ncclcheck",
            "smoke",
            *QUICK,
            "--nproc",
            "2",
            "--ops",
            "broadcast,barrier",
            "--log-dir",
            str(tmp_path / "ok"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.strip().startswith("broadcast") for line in lines) == 2  # its progress line and its table row
    barrier = next(line for line in lines if line.split()[:1] == ["barrier"] and "float" in line)
    assert barrier.split()[1:3] == ["-", "-"]
    code, report = smoke(
        tmp_path,
        "--nproc",
        "2",
        "--sizes",
        "8:2K",
        "--timeout",
        "3",
        "--ops",
        "all_reduce",
        "--drill",
        "hang@1:all_reduce",
    )
    (hung,) = [r for r in report["results"] if r["status"] == "hang"]
    assert code == 1 and hung["bytes"] == 8  # the first size: rank 1 hangs before its first all_reduce
    no_orphans()


def test_an_unwritable_json_path_is_refused_before_anything_is_launched(tmp_path: Path) -> None:
    for path, words in ((tmp_path / "no" / "x.json", "no directory"), (tmp_path, "is a directory")):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "ncclcheck",
                "smoke",
                *QUICK,
                "--json",
                str(path),
                "--log-dir",
                str(tmp_path / "logs"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())
    no_orphans()
