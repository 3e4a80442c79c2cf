"""``ncclcheck run -- torchrun ...``: real torchrun/gloo jobs under the doctor, as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import WORKERS

pytestmark = pytest.mark.integration

WORKER = WORKERS / "watch_job.py"
TORCHRUN = [
    sys.executable,
    "-m",
    "torch.distributed.run",
    "--standalone",
    "--nproc-per-node=2",
    "--monitor-interval=0.5",
]


def run(
    tmp: Path, *extra: str, env: dict[str, str] | None = None, cmd: list[str] | None = None, timeout: float = 180
) -> tuple[int, str, str, dict[str, Any]]:
    argv = [
        sys.executable,
        "-m",
        "ncclcheck",
        "run",
        "--dir",
        str(tmp / "run"),
        *extra,
        "--",
        *(cmd or [*TORCHRUN, str(WORKER)]),
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout, check=False
    )
    return done.returncode, done.stdout, done.stderr, json.loads((tmp / "run" / "report.json").read_text())


def ours(process_info: dict[str, Any], tmp: Path) -> bool:
    """A rank of this test's job: ``run`` puts the run dir (under the test's tmp_path) in every rank's environment,
    so a job another pytest-xdist worker runs at the same time is never taken for this one's."""
    return "watch_job.py" in " ".join(process_info["cmdline"] or []) and any(
        str(tmp) in value for value in (process_info["environ"] or {}).values()
    )


def no_job_left(tmp: Path) -> bool:
    return not any(ours(p.info, tmp) for p in psutil.process_iter(["cmdline", "environ"]))


def complete(run_dir: Path) -> None:
    for name in ("manifest.json", "report.json", "logs/launcher.log"):
        assert (run_dir / name).is_file(), name
    for sub in ("nccl", "fr", "hangs"):
        assert (run_dir / sub).is_dir(), sub


def test_a_healthy_job_passes_and_its_output_is_passed_through(tmp_path: Path) -> None:
    code, out, err, report = run(tmp_path, env={"MODE": "finish", "FINISH_AFTER": "2"})
    assert code == 0 and report["verdict"]["status"] == "pass" and report["exit_code"] == 0, err
    assert report["schema"] == "ncclcheck.run/1" and report["hangs"] == []
    assert "done 0" in out and "done 1" in out  # the job's own output, on stdout, unchanged
    assert "done 0" in (tmp_path / "run" / "logs" / "launcher.log").read_text()
    assert "set    TORCH_FR_BUFFER_SIZE=2000" in err  # torch 2.13 reads the new name: the old one would only warn
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated" not in out + err
    complete(tmp_path / "run")
    logs = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "logs", str(tmp_path / "run"), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert logs.returncode == 0 and json.loads(logs.stdout)["verdict"]["status"] == "pass", logs.stdout
    assert no_job_left(tmp_path)


def test_the_user_s_own_settings_are_kept_and_the_rest_is_set(tmp_path: Path) -> None:
    probe = "import os; print(*(f'{k}={os.environ.get(k)}' for k in os.environ['KEYS'].split()))"
    keys = (
        "TORCH_FR_BUFFER_SIZE TORCH_NCCL_TRACE_BUFFER_SIZE TORCH_FR_DUMP_ON_TIMEOUT NCCL_DEBUG NCCL_DEBUG_FILE "
        "PYTHONFAULTHANDLER TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_DISTRIBUTED_DEBUG"
    )
    code, out, _, report = run(
        tmp_path, env={"TORCH_FR_BUFFER_SIZE": "500", "KEYS": keys}, cmd=[sys.executable, "-c", probe]
    )
    seen = dict(word.split("=", 1) for word in out.split())
    assert code == 0 and seen["TORCH_FR_BUFFER_SIZE"] == "500" and seen["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "None"
    assert (
        seen["TORCH_FR_DUMP_ON_TIMEOUT"] == "1" and seen["NCCL_DEBUG"] == "WARN" and seen["PYTHONFAULTHANDLER"] == "1"
    )
    assert seen["NCCL_DEBUG_FILE"] == str(tmp_path / "run" / "nccl" / "nccl.%h.%p")
    assert seen["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "None" and seen["TORCH_DISTRIBUTED_DEBUG"] == "None"
    assert report["evidence"]["kept"] == {"TORCH_FR_BUFFER_SIZE": "500"}
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in report["evidence"]["set"]
    complete(tmp_path / "run")


def test_a_crash_passes_its_exit_code_through_and_names_the_rank(tmp_path: Path) -> None:
    code, _, err, report = run(tmp_path, env={"MODE": "finish", "FINISH_AFTER": "1", "FAIL_RANK": "1"})
    assert code == 1 and report["exit_code"] == 1, err
    assert report["verdict"]["status"] == "fail" and report["verdict"]["ranks"] == [1], report["verdict"]
    assert "rank-left-early" not in json.dumps(report["findings"])
    complete(tmp_path / "run")
    assert no_job_left(tmp_path)


@pytest.mark.parametrize("after", ["8", "0"])
def test_a_rank_that_leaves_early_while_the_others_fail_is_named(tmp_path: Path, after: str) -> None:
    """However soon the others fail: at once (gloo fails the survivor the moment its peer's socket closes) or later."""
    code, _, err, report = run(tmp_path, "--interval", "0.5", env={"MODE": "early", "EARLY_AFTER": after})
    assert code == 1, err
    assert report["verdict"]["root_cause"] == "rank-left-early" and report["verdict"]["ranks"] == [0], report
    complete(tmp_path / "run")
    assert no_job_left(tmp_path)


def test_a_rank_done_first_is_not_blamed_for_a_peer_s_own_error(tmp_path: Path) -> None:
    code, _, err, report = run(tmp_path, "--interval", "0.5", env={"MODE": "own-error"})
    assert code == 1, err
    assert "rank-left-early" not in json.dumps(report["findings"]), report["findings"]
    assert report["verdict"]["root_cause"] != "rank-left-early" and 0 not in report["verdict"]["ranks"], report


def test_a_job_of_a_few_seconds_leaves_its_samples(tmp_path: Path) -> None:
    """The sampler looks as soon as the ranks appear and once more when they end, whatever --interval says."""
    code, _, err, report = run(tmp_path, env={"MODE": "finish", "FINISH_AFTER": "0.5"})
    assert code == 0 and report["verdict"]["status"] == "pass", err
    lines = [json.loads(line) for line in (tmp_path / "run" / "watch-agent.jsonl").read_text().splitlines()]
    assert len(lines) >= 2, lines
    ranks = {r["rank"] if isinstance(r, dict) else r[0] for line in lines for r in line["ranks"]}  # in full, or a row
    assert ranks == {0, 1} and all(isinstance(r, dict) for r in lines[0]["ranks"]), lines


def test_a_straggler_is_caught_live_and_ctrl_c_leaves_nothing_behind(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "ncclcheck",
        "run",
        "--dir",
        str(tmp_path / "run"),
        "--stall",
        "4",
        "--",
        *TORCHRUN,
        str(WORKER),
    ]
    env = {**os.environ, "MODE": "straggler", "STUCK_RANK": "1"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hangs = tmp_path / "run" / "hangs"
    deadline = time.monotonic() + 120
    while not (hangs.is_dir() and any(hangs.iterdir())):
        assert proc.poll() is None and time.monotonic() < deadline, "no hang record"
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)  # the user's ^C
    _, err = proc.communicate(timeout=120)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert proc.returncode == 130, err
    assert "ncclcheck run: hang: rank 0 waits in all_reduce" in err and "rank 1, at watch_job.py" in err
    assert "press ^C again to end them all now" in err  # the grace period said, not 30 silent seconds
    assert report["verdict"]["status"] == "hang" and report["verdict"]["ranks"] == [1], report["verdict"]
    record = json.loads(Path(report["hangs"][0]["path"]).read_text())
    assert record["schema"] == "ncclcheck.watch/2" and [f["kind"] for f in record["findings"]] == ["straggler"]
    assert all(r["stack"] for r in record["ranks"]), "every local rank's stack is in the record"
    # the incident beside it: what it could not have on this machine (no NCCL RAS, no GPU driver) is said, with why
    incident = record["incident"]
    assert Path(incident["folder"], "incident.json").is_file() and "nothing listens" in incident["missing"]["ras"]
    assert "gpus" in incident["missing"] and "flight_recorder" not in incident["missing"]  # gloo: nobody asked
    complete(tmp_path / "run")
    # The run dir read back by `ncclcheck logs` (as for several nodes' dirs): the hang seen live is the cause.
    logs = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "logs", str(tmp_path / "run"), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    verdict = json.loads(logs.stdout)["verdict"]
    assert logs.returncode == 1 and verdict["root_cause"] == "hang-recorded" and verdict["culprits"] == [1], verdict
    # The run's sampler is this node's agent: its lines (up to the hang record; ^C ended the ranks after it)
    # replay into the job-wide view.
    lines = (tmp_path / "run" / "watch-agent.jsonl").read_text().splitlines()
    until = [line for line in lines if json.loads(line)["time"] <= report["hangs"][0]["time"] + 0.5]
    (tmp_path / "until-hang.jsonl").write_text("\n".join(until) + "\n")
    view = subprocess.run(
        [
            sys.executable,
            "-m",
            "ncclcheck",
            "watch",
            "--agents",
            str(tmp_path / "until-hang.jsonl"),
            "--once",
            "--json",
            "--stall",
            "4",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    seen = json.loads(view.stdout)
    assert [(f["kind"], f["culprits"]) for f in seen["findings"]][:1] == [("straggler", [1])], seen["findings"]
    deadline = time.monotonic() + 30
    while not no_job_left(tmp_path):
        assert time.monotonic() < deadline, "ranks left behind after ^C"
        time.sleep(0.2)


def test_a_sigkilled_rank_is_named(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "ncclcheck", "run", "--dir", str(tmp_path / "run"), "--", *TORCHRUN, str(WORKER)]
    proc = subprocess.Popen(
        argv, env={**os.environ, "MODE": "wait"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        victim = None
        while victim is None:
            assert time.monotonic() < deadline and proc.poll() is None, "the job never started"
            for p in psutil.process_iter(["cmdline", "environ"]):
                if (p.info["environ"] or {}).get("RANK") == "1" and ours(p.info, tmp_path):
                    victim = p
            time.sleep(0.3)
        time.sleep(2)
        victim.kill()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # failed on the way: SIGTERM to run ends its job too; nothing is left behind
            proc.terminate()
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert proc.returncode == 1 and report["verdict"]["status"] == "fail", err
    assert report["verdict"]["ranks"] == [1], report["verdict"]
    complete(tmp_path / "run")
    assert no_job_left(tmp_path)


def test_bad_usage_is_one_line(tmp_path: Path) -> None:
    none = subprocess.run([sys.executable, "-m", "ncclcheck", "run"], capture_output=True, text=True, check=False)
    assert none.returncode == 2 and none.stderr.count("\n") == 1 and "no command to run" in none.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "run", "--dir", str(tmp_path / "r"), "--", "no-such-launcher"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 127 and "no-such-launcher: command not found" in missing.stderr


def test_a_hard_error_in_the_logs_stays_the_cause_over_a_hang_record() -> None:
    from ncclcheck.analysis.logs.verdict import with_hangs
    from ncclcheck.model.findings import Finding
    from ncclcheck.model.log_report import LogReport
    from ncclcheck.model.run import HangRecord

    hang = HangRecord("h.json", 1.0, ("straggler",), (0, 1), (1,), "rank 1 is not in any collective", "node0")
    nic = Finding("nccl-ib-error", "error", "NET/IB: completion error on mlx5_0", ranks=(3,))
    timeout = Finding("collective-timeout", "error", "collective timed out", ranks=(0, 2))
    for logged, cause in (((), "hang-recorded"), ((timeout,), "hang-recorded"), ((nic, timeout), "nccl-ib-error")):
        report = LogReport(logged, (), (), (), logged[0] if logged else None, 10)
        merged = with_hangs(report, (hang,))
        assert merged.root_cause is not None and merged.root_cause.id == cause, (logged, merged.root_cause)
    untouched = LogReport((), (), (), (), None, 10)
    assert with_hangs(untouched, ()) is untouched


def test_a_hang_record_of_warnings_only_is_read_and_a_record_of_no_hang_is_not(tmp_path: Path) -> None:
    from ncclcheck.collectors import hang_records

    def record(name: str, *findings: tuple[str, str, list[int]]) -> None:
        found = [
            {"kind": k, "severity": s, "message": f"{k} here", "ranks": [0, 1], "culprits": c} for k, s, c in findings
        ]
        ranks = [{"rank": 0, "host": "node0"}, {"rank": 1, "host": "node0"}]
        data = {"schema": "ncclcheck.watch/2", "time": 5.0, "findings": found, "ranks": ranks}
        (tmp_path / "hangs" / name).write_text(json.dumps(data))

    (tmp_path / "hangs").mkdir()
    record("hang-1.json", ("straggler", "warning", [1]))  # its line still moved: run records it as a warning
    record("hang-2.json", ("slow-rank", "info", [1]))
    record("hang-3.json", ("progress", "warning", []), ("mismatch", "error", [2]))
    (tmp_path / "hangs" / "hang-4.json").write_text('{"schema": "ncclcheck.wat')  # cut short
    found = hang_records.find([str(tmp_path)])
    assert [(h.kinds, h.culprits, h.host) for h in found] == [
        (("straggler",), (1,), "node0"),
        (("mismatch",), (2,), "node0"),
    ]


def test_on_hang_exit_ends_the_job_once_the_evidence_is_taken(tmp_path: Path) -> None:
    code, _, err, report = run(
        tmp_path, "--stall", "4", "--interval", "1", "--on-hang", "exit", env={"MODE": "straggler", "STUCK_RANK": "1"}
    )
    assert code != 0 and report["verdict"]["status"] == "hang" and report["verdict"]["ranks"] == [1], err
    assert len(report["hangs"]) == 1 and Path(report["hangs"][0]["path"]).is_file()
    assert report["exit_code"] == code
    complete(tmp_path / "run")
    # ncclcheck ended it: said by run, and by `logs RUN_DIR` afterwards (the hang record says so), never "from outside"
    logs = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "logs", str(tmp_path / "run"), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    for said in (report, json.loads(logs.stdout)):
        kinds = [f["id"] for f in said["findings"]]
        assert "ended-by-ncclcheck" in kinds and "launcher-terminated" not in kinds, kinds
        assert not any("from outside" in f["message"] for f in said["findings"]), said["findings"]
    assert no_job_left(tmp_path)


def test_a_dump_is_asked_through_each_rank_s_pipe_and_a_pipe_nobody_reads_is_counted(tmp_path: Path) -> None:
    """NCCL's watchdog makes <stem><rank>.pipe and reads it; a write asks for a dump. Here a reader stands in for
    rank 0's watchdog; rank 1's pipe has no reader (gloo, or the rank is gone): ENXIO, nothing written."""
    from ncclcheck.collectors.dump_request import ask_for_dumps

    stem = str(tmp_path / "pipe_")
    for rank in (0, 1):
        os.mkfifo(f"{stem}{rank}.pipe")
    reader = os.open(f"{stem}0.pipe", os.O_RDONLY | os.O_NONBLOCK)  # as the watchdog opens it
    try:
        assert ask_for_dumps(stem) == (1, 1)
        assert os.read(reader, 16) == b"1\n"
    finally:
        os.close(reader)
    assert ask_for_dumps(str(tmp_path / "none_")) == (0, 0)


@pytest.mark.xdist_group("agents_and_test_hosts")
def test_one_run_dir_per_node_of_a_two_node_job_makes_one_verdict(tmp_path: Path) -> None:
    """`ncclcheck run` on each of two test hosts (a c10d job, rank 1 on node0 in its data loader): node0's run records
    the hang and names rank 1; node1's cannot see rank 1 and records nothing. `logs` over both run dirs gives one job
    verdict, and both runs' agent files give the job-wide view."""
    from netns import two_hosts

    with two_hosts("10.79.10") as hosts:
        procs = []
        for i, host in enumerate(hosts):
            torchrun = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=2",
                "--rdzv-backend=c10d",
                "--rdzv-endpoint=node0:29591",
                "--rdzv-id=runs",
                *(["--rdzv-conf=is_host=1"] if i == 0 else []),
                "--monitor-interval=1",
                str(WORKER),
            ]
            argv = [
                sys.executable,
                "-m",
                "ncclcheck",
                "run",
                "--dir",
                str(tmp_path / f"node{i}"),
                "--stall",
                "4",
                "--interval",
                "1",
                "--",
                *torchrun,
            ]
            env = {**os.environ, "MODE": "straggler", "STUCK_RANK": "1", "GLOO_SOCKET_IFNAME": "eth0"}
            procs.append(host.popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        deadline = time.monotonic() + 150
        while not any((tmp_path / "node0" / "hangs").glob("hang-*.json")):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "node0 recorded no hang"
            time.sleep(0.3)
        time.sleep(3)  # node1 has sampled its waiting ranks a few times
        runs = [
            p
            for p in psutil.process_iter(["cmdline"])
            if (p.info["cmdline"] or [""])[0] == sys.executable
            and "run" in (p.info["cmdline"] or [])
            and str(tmp_path) in " ".join(p.info["cmdline"] or [])
        ]
        assert len(runs) == 2
        for p in runs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            p.communicate(timeout=120)
    reports = [json.loads((tmp_path / f"node{i}" / "report.json").read_text()) for i in (0, 1)]
    assert reports[0]["verdict"]["status"] == "hang" and reports[0]["verdict"]["ranks"] == [1], reports[0]["verdict"]
    # node1's ranks stood still too, waiting on ranks they cannot see: a hang with nobody to blame, never the network
    assert [(h["kinds"], h["culprits"]) for h in reports[1]["hangs"]] in ([], [(["waiting-remote"], [])])
    assert "stalled" not in json.dumps(reports[1]["findings"])
    logs = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "logs", str(tmp_path / "node0"), str(tmp_path / "node1"), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    verdict = json.loads(logs.stdout)["verdict"]
    assert verdict["root_cause"] == "hang-recorded" and verdict["culprits"] == [1], verdict
    lines = []
    for i in (0, 1):
        hang_time = reports[0]["hangs"][0]["time"]
        lines += [
            line
            for line in (tmp_path / f"node{i}" / "watch-agent.jsonl").read_text().splitlines()
            if json.loads(line)["time"] <= hang_time + 1
        ]
    (tmp_path / "both.jsonl").write_text("\n".join(lines) + "\n")
    view = subprocess.run(
        [
            sys.executable,
            "-m",
            "ncclcheck",
            "watch",
            "--agents",
            str(tmp_path / "both.jsonl"),
            "--once",
            "--json",
            "--stall",
            "4",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    seen = json.loads(view.stdout)
    assert [(n["host"], n["agent"]) for n in seen["nodes"]] == [("node0", "ok"), ("node1", "ok")], seen["nodes"]
    assert [(f["kind"], f["culprits"]) for f in seen["findings"]][:1] == [("straggler", [1])], seen["findings"]
    assert no_job_left(tmp_path)


def test_both_flight_recorder_names_are_set_for_a_torch_older_than_2_8_and_the_user_s_are_kept() -> None:
    from ncclcheck.analysis.run.env import evidence_env, job_env
    from ncclcheck.model.run import RunDir

    old = job_env({}, evidence_env({}, RunDir("/r"), False, "2.5.1+cu124"))
    assert old["TORCH_FR_BUFFER_SIZE"] == old["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert old["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "/r/fr/rank_" and "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in old
    unknown = job_env({}, evidence_env({}, RunDir("/r"), False, None))
    assert unknown["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"  # torch not importable here: both names, to be safe
    new = job_env({}, evidence_env({}, RunDir("/r"), False, "2.13.0"))
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in new and new["TORCH_FR_DUMP_ON_TIMEOUT"] == "1"
    mine = job_env(
        {"TORCH_NCCL_TRACE_BUFFER_SIZE": "64"},
        evidence_env({"TORCH_NCCL_TRACE_BUFFER_SIZE": "64"}, RunDir("/r"), False, "2.5.1"),
    )
    assert mine["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "64" and "TORCH_FR_BUFFER_SIZE" not in mine
    # The old name set by the user on a new torch: still theirs, the new name is not set over it.
    aliased = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "64"}
    kept = job_env(aliased, evidence_env(aliased, RunDir("/r"), False, "2.13.0"))
    assert kept["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "64" and "TORCH_FR_BUFFER_SIZE" not in kept
    deep = job_env({}, evidence_env({}, RunDir("/r"), True, "2.13.0"))
    assert deep["NCCL_DEBUG"] == "INFO" and deep["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"


def test_a_run_whose_reader_went_away_still_ends_the_job_and_writes_its_report(tmp_path: Path) -> None:
    """``ncclcheck run ... | tee log`` and ^C: the pipe's reader dies first; run must still finish its work."""
    argv = [sys.executable, "-m", "ncclcheck", "run", "--dir", str(tmp_path / "run"), "--", *TORCHRUN, str(WORKER)]
    env = {**os.environ, "MODE": "finish", "FINISH_AFTER": "3"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None and proc.stdout is not None
    proc.stderr.readline()  # ncclcheck run: evidence in ...
    proc.stderr.close()
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["verdict"]["status"] == "pass", report["verdict"]
    assert no_job_left(tmp_path)


def test_rank_ends_are_seen_in_order_with_their_exit_codes() -> None:
    """pidfds wake the watcher the moment each process ends, added before or while it sleeps; the exit code is read
    from the zombie (these are our children: nothing reaps them before we look)."""
    from ncclcheck.collectors.rank_ends import RankEnds

    ends = RankEnds()
    first = subprocess.Popen(["sh", "-c", "sleep 0.3; exit 3"])
    ends.add(0, first.pid)
    time.sleep(0.1)  # the watcher sleeps in select(): the second is added meanwhile
    second = subprocess.Popen(["sh", "-c", "sleep 0.8"])
    ends.add(1, second.pid)
    deadline = time.monotonic() + 10
    while len(ends.ends()) < 2:
        assert time.monotonic() < deadline, ends.ends()
        time.sleep(0.05)
    ends.close()
    first.wait()
    second.wait()
    seen = ends.ends()
    assert [(e.rank, e.exit_code) for e in seen] == [(0, 3), (1, 0)] and seen[0].time < seen[1].time, seen


def test_flight_recorder_dumps_written_after_the_ask_are_copied_under_the_hang_s_name(tmp_path: Path) -> None:
    from ncclcheck.collectors.incident import _flight_dumps

    fr, folder = tmp_path / "fr", tmp_path / "hang"
    fr.mkdir()
    folder.mkdir()
    old = fr / "rank_1"
    old.write_bytes(b"an older dump")
    os.utime(old, (1000.0, 1000.0))  # from an earlier hang: not this one's
    (fr / "rank_0").write_bytes(b"\x80\x02}q\x00.")
    copied = _flight_dumps(str(fr), str(folder), time.time() - 0.5, ranks=1)
    assert sorted(copied) == ["fr_rank_0"] and (folder / "fr_rank_0").read_bytes() == b"\x80\x02}q\x00."


def test_early_dumps_are_copied_once_written_and_forgotten_when_the_stall_ends(tmp_path: Path) -> None:
    from ncclcheck.collectors.incident import EarlyDumps

    fr = tmp_path / "fr"
    fr.mkdir()
    early = EarlyDumps(str(fr))
    assert early.suspect(True) == 0 and early.asked_at is None  # no NCCL rank's pipe (gloo): nobody asked
    early.asked_at, early.folder, early.asks = time.time() - 0.5, str(fr / "early-1"), 1  # as after an ask
    (fr / "rank_0").write_bytes(b"dump of rank 0")
    early.suspect(True)  # first look: its size seen
    assert early.copies() == {}
    early.suspect(True)  # the same size again: written, copied
    assert early.copies() == {"fr_early_rank_0": str(fr / "early-1" / "rank_0")}
    (fr / "rank_0").write_bytes(b"a later dump overwrites the file: not the copy")
    assert (fr / "early-1" / "rank_0").read_bytes() == b"dump of rank 0"
    early.suspect(False)  # the ranks moved again: the next stall asks anew
    assert early.asked_at is None and early.copies() == {}
