"""``ncclcheck run``'s control plane on real torchrun/gloo jobs: the hook serves every rank's live Flight Recorder
and stacks on a unix socket; on a hang they are fetched, judged and the exact culprit recorded."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import WORKERS
from rich.console import Console

from ncclcheck.cli import main
from ncclcheck.commands.run import control
from ncclcheck.model.run import HangRecord, RunDir

pytestmark = pytest.mark.integration

WORKER = WORKERS / "subgroup_skip.py"


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(WORKER)]


def run(
    tmp: Path, env: dict[str, str], *extra: str, cmd: list[str] | None = None
) -> tuple[int, str, str, dict[str, Any]]:
    argv = [sys.executable, "-m", "ncclcheck", "run", "--dir", str(tmp / "run"), "--stall", "3", "--interval", "0.5"]
    argv += [*extra, "--", *(cmd or torchrun(4))]
    done = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, "HANG_S": "60", **env}, timeout=180, check=False
    )
    assert no_job_left(tmp)
    return done.returncode, done.stdout, done.stderr, json.loads((tmp / "run" / "report.json").read_text())


def no_job_left(tmp: Path) -> bool:
    def ours(info: dict[str, Any]) -> bool:
        return "subgroup_skip.py" in " ".join(info["cmdline"] or []) and any(
            str(tmp) in v for v in (info["environ"] or {}).values()
        )

    return not any(ours(p.info) for p in psutil.process_iter(["cmdline", "environ"]))


def records(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in (run_dir / "control").glob("rank*.json")}


def test_a_rank_skipping_its_pairs_all_reduce_is_named_exactly(tmp_path: Path) -> None:
    """Its buffer shows one pair all_reduce between world barriers every earlier step, none this time."""
    code, _, err, report = run(tmp_path, {"MODE": "skip", "STEPS": "3"}, "--on-hang", "exit")
    assert code != 0 and report["verdict"]["status"] == "hang", err[-3000:]
    assert report["verdict"]["ranks"] == [3] and report["verdict"]["root_cause"] == "fr-not-joined", report["verdict"]
    hang = report["hangs"][0]
    assert hang["culprits"] == [3] and "rank 3 never joined it" in hang["message"]
    record = json.loads(Path(hang["path"]).read_text())
    assert record["control_plane"]["culprits"] == [3] and record["control_plane"]["answered"] == [0, 1, 2, 3]
    fetched = Path(report["evidence"]["control_plane"][0])
    assert sorted(p.name for p in fetched.glob("live_fr_rank*.json")) == [f"live_fr_rank{r}.json" for r in range(4)]
    assert json.loads((fetched / "live_groups_rank3.json").read_text())["2"]["ranks"] == [2, 3]
    logs = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "logs", str(fetched), "--json"], capture_output=True, text=True, check=False
    )
    assert json.loads(logs.stdout)["verdict"]["culprits"] == [3], logs.stdout[-2000:]  # the hang's folder read alone
    # run's sampler is this node's agent: its lines carry the recorders, and the job-wide view judges them
    lines = (tmp_path / "run" / "watch-agent.jsonl").read_text().splitlines()
    asked = [i for i, line in enumerate(lines) if json.loads(line).get("flight")]
    assert asked, "no agent line carries the Flight Recorders"
    (tmp_path / "stall.jsonl").write_text("\n".join(lines[: asked[0] + 1]) + "\n")
    view = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "watch", "--agents", str(tmp_path / "stall.jsonl"), "--once", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    first = json.loads(view.stdout)["findings"][0]
    assert (first["kind"], first["culprits"]) == ("fr-not-joined", [3]), view.stdout[-2000:]
    assert "subgroup_skip.py" in (fetched / "live_stacks_rank3.txt").read_text()
    assert "control plane: rank 0-3 answered" in err and "(rank 3)" in err
    assert not list((tmp_path / "run" / "control").glob("*.sock"))  # the job is over: its sockets are gone


def test_a_skip_of_a_groups_first_collective_names_nobody_from_the_recorders(tmp_path: Path) -> None:
    """STEPS=0: rank 3's Flight Recorder holds nothing of its pair (its members come from the hook's handler), and no
    earlier step shows its program: rank 3 skipping or rank 2 issuing one too many the recorders cannot tell apart
    (another pair's count is no measure: groups of one size may issue different numbers). Never rank 2 alone."""
    code, _, err, report = run(tmp_path, {"MODE": "skip", "STEPS": "0"}, "--on-hang", "exit")
    assert code != 0 and report["verdict"]["status"] == "hang", err[-3000:]
    hang = report["hangs"][0]
    record = json.loads(Path(hang["path"]).read_text())
    assert record["control_plane"]["culprits"] == [] and record["control_plane"]["answered"] == [0, 1, 2, 3]
    fetched = Path(report["evidence"]["control_plane"][0])
    assert json.loads((fetched / "live_groups_rank3.json").read_text())["2"]["ranks"] == [2, 3]
    assert hang["culprits"] != [2] and report["verdict"].get("culprits", []) != [2], report["verdict"]


def test_a_job_that_starts_torch_s_debug_server_is_asked_through_it(tmp_path: Path) -> None:
    """start_debug_server() after init_process_group: ours steps aside (its socket gone) and the rank's record
    points to the debug server's own worker server; a hang is judged through it, the culprit exact."""
    # starting the debug server holds a rank out of new_group for seconds on a loaded machine: with the helper's
    # --stall 3 the others' wait for it is a straggler by that threshold (the last --stall given wins)
    code, _, err, report = run(tmp_path, {"MODE": "skip", "DEBUG_SERVER": "1"}, "--on-hang", "exit", "--stall", "12")
    assert code != 0 and report["verdict"]["ranks"] == [3], (report["verdict"], err[-3000:])
    served = records(tmp_path / "run")
    notes = {p.name: p.read_text() for p in (tmp_path / "run" / "control").glob("note-*")}
    urls = {rank: str(r.get("url", "")) for rank, r in served.items()}
    assert sorted(urls) == [0, 1, 2, 3], (served, notes)
    assert all(u.startswith("http://localhost:") for u in urls.values()), (served, notes)
    asked = json.loads(Path(report["hangs"][0]["path"]).read_text())["control_plane"]["asked"]
    assert sorted(asked.values()) == sorted(urls.values())


def test_a_healthy_job_with_two_subgroups_and_a_world_barrier_passes(tmp_path: Path) -> None:
    code, _, err, report = run(tmp_path, {"MODE": "", "SLEEP_S": "0.2"})
    assert code == 0 and report["verdict"]["status"] == "pass" and report["hangs"] == [], err[-3000:]
    served = records(tmp_path / "run")
    assert sorted(served) == [0, 1, 2, 3] and {r["owner"] for r in served.values()} == {"ncclcheck"}
    assert "set    NCCLCHECK_CONTROL_DIR=" in err and "idle until asked" in err
    assert not list((tmp_path / "run" / "control").glob("hang-*"))
    assert os.stat(tmp_path / "run" / "control").st_mode & 0o777 == 0o700


def test_a_job_serving_its_own_control_plane_is_used_not_doubled(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    code, _, err, report = run(
        tmp_path, {"MODE": "skip", "WORKER_MAIN": "1", "THEIR_DIR": str(theirs)}, "--on-hang", "exit"
    )
    served = records(tmp_path / "run")
    assert code != 0 and {r["owner"] for r in served.values()} == {"job"}, err[-3000:]
    assert {r["socket"] for r in served.values()} == {str(theirs / f"rank{n}.sock") for n in range(4)}
    assert report["verdict"]["ranks"] == [3], report["verdict"]  # fetched through the job's own sockets


def test_the_user_s_own_sitecustomize_still_runs_once_per_process(tmp_path: Path) -> None:
    site, seen = tmp_path / "site", tmp_path / "seen.txt"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import os\nwith open({str(seen)!r}, 'a') as f:\n    f.write(str(os.getpid()) + '\\n')\n"
    )
    code, _, err, _ = run(tmp_path, {"MODE": "", "SLEEP_S": "0.2", "PYTHONPATH": str(site)}, cmd=torchrun(2))
    assert code == 0, err[-3000:]
    pids = seen.read_text().split()
    assert len(pids) == len(set(pids)) == 4  # ncclcheck (started with it too), torchrun, two ranks: each once
    assert sorted(records(tmp_path / "run")) == [0, 1]  # and ours still served


def test_a_job_that_never_creates_a_process_group_starts_no_server(tmp_path: Path) -> None:
    code, _, err, _ = run(tmp_path, {"NO_PG": "1", "SLEEP_S": "0.5"}, cmd=torchrun(2))
    assert code == 0, err[-3000:]
    names = [p.name for p in (tmp_path / "run" / "control").iterdir()]
    assert names == ["hook"]  # no rank record, no socket, no note


def test_no_control_puts_nothing_on_the_jobs_pythonpath(tmp_path: Path) -> None:
    show = [
        sys.executable,
        "-c",
        "import os; print('PP=' + os.environ.get('PYTHONPATH', ''), 'NCCLCHECK_CONTROL_DIR' in os.environ)",
    ]
    _, out, _, _ = run(tmp_path, {}, cmd=show)
    assert str(tmp_path / "run" / "control" / "hook") in out and "True" in out
    _, out, err, report = run(tmp_path / "off", {}, "--no-control", cmd=show)
    assert os.path.join("control", "hook") not in out
    assert "False" in out and "NCCLCHECK_CONTROL_DIR" not in report["evidence"]["set"]
    assert not (tmp_path / "off" / "run" / "control").exists() and "--no-control" in err


def skip_job(run_dir: Path) -> subprocess.Popen[str]:
    """The sub-group skip job started with run's hook (no sampler), once its ranks wait in the last step."""
    (run_dir / "hangs").mkdir(parents=True)
    setting, hook_dir, _ = control.prepare(RunDir(str(run_dir)), True)
    assert setting is not None
    env = control.with_hook({**os.environ, "MODE": "skip", "HANG_S": "60", setting.names[0]: setting.value}, hook_dir)
    job = subprocess.Popen(torchrun(4), env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert job.stdout is not None
    ready = 0
    while ready < 4:
        line = job.stdout.readline()
        assert line, "the job ended early"
        ready += line.count("ready ")  # python -u writes "ready N" and its newline apart: lines of ranks interleave
    deadline = time.monotonic() + 30
    while len(records(run_dir)) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # the last step: rank 3 skips, the others wait
    return job


def test_watch_asks_the_ranks_control_plane_and_names_the_rank_that_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = skip_job(tmp_path / "run")
    try:
        code = main(["watch", "--once", "--json", "--pid", str(job.pid), "--stall", "1.5", "--settle", "3.5"])
        seen = json.loads(capsys.readouterr().out)
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(30)
    assert code == 1, seen["findings"]
    first = seen["findings"][0]
    assert (first["kind"], first["culprits"]) == ("fr-not-joined", [3]), seen["findings"]
    assert no_job_left(tmp_path)


def test_a_rank_that_does_not_answer_is_named_within_a_second_and_the_rest_judged(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    job = skip_job(run_dir)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        silent.bind(str(tmp_path / "silent.sock"))
        silent.listen(8)  # connects, and is never answered
        rank1 = run_dir / "control" / "rank1.json"
        rank1.write_text(json.dumps({**json.loads(rank1.read_text()), "socket": str(tmp_path / "silent.sock")}))
        hang = run_dir / "hangs" / "hang-x-1.json"
        hang.write_text("{}")
        out = io.StringIO()
        began = time.monotonic()
        got = control.on_hang(
            RunDir(str(run_dir)), HangRecord(str(hang), 0.0, ("mismatch",), (2,), (2,), "stacks"), Console(file=out)
        )
        assert time.monotonic() - began < 3.0
    finally:
        silent.close()
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(30)
    said = out.getvalue()
    assert "rank 1 did not answer within 1 s" in said and "rank 0,2-3 answered" in said, said
    answers = json.loads((run_dir / "control" / "hang-x-1" / "answers.json").read_text())
    assert list(answers["silent"]) == ["1"] and answers["answered"] == [0, 2, 3]
    assert any(f["id"] == "control-silent" for f in answers["findings"])
    assert any(f["id"] == "fr-not-joined" for f in answers["findings"])  # the others were judged
    assert got.culprits in ((2,), ())  # nobody named from the FRs alone: the stacks' own vote stays
    assert no_job_left(tmp_path)


ONE_RANK = (
    "import os, sys, torch.distributed as d\n"
    "d.init_process_group('gloo', init_method='file://' + os.environ['STORE'], rank=0, world_size=1)\n"
    "from ncclcheck.collectors.control_plane import ask, sockets_in\n"
    "found = sockets_in(os.environ['NCCLCHECK_CONTROL_DIR'])\n"
    "print('answers', {r: ask(p, 'ping').decode() for r, p in found.items()})\n"
)


def one_rank(tmp: Path, control_dir: Path, prepare: bool = True) -> subprocess.CompletedProcess[str]:
    """A one-rank gloo job started with run's hook (``prepare``: placed afresh, the control dir made 0700)."""
    hook_dir = str(control_dir / "hook")
    if prepare:
        setting, _, _ = control.prepare(RunDir(str(control_dir.parent)), True)
        assert setting is not None and setting.value == str(control_dir)
    env = {**os.environ, "STORE": str(tmp / "store"), "NCCLCHECK_CONTROL_DIR": str(control_dir)}
    env = control.with_hook({**env, "PYTHONPATH": os.pathsep.join(sys.path)}, hook_dir)
    return subprocess.run([sys.executable, "-c", ONE_RANK], env=env, capture_output=True, text=True, timeout=120)


def test_a_run_dir_too_long_for_a_unix_socket_serves_from_a_short_private_dir(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    done = one_rank(tmp_path, deep / "control")
    try:
        assert done.returncode == 0, done.stderr[-2000:]
        where = records(deep)[0]["socket"]
        assert where.startswith("/tmp/ncclcheck-") and len(where.encode()) <= 107
        assert "answers {0: " in done.stdout  # found through the record, answered
        assert os.stat(os.path.dirname(where)).st_mode & 0o777 == 0o700
    finally:
        control.finish(RunDir(str(deep)))
    assert not os.path.exists(os.path.dirname(where))


def test_the_hook_never_fails_the_program_it_only_leaves_a_note(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = one_rank(tmp_path, run_dir / "control")
    assert done.returncode == 0 and "answers {0: " in done.stdout, done.stderr[-2000:]
    os.chmod(run_dir / "control", 0o755)  # not private any more: the hook must refuse to serve there, quietly
    (run_dir / "control" / "rank0.json").unlink()
    done = one_rank(tmp_path, run_dir / "control", prepare=False)
    assert done.returncode == 0 and "answers {}" in done.stdout, done.stderr[-2000:]
    notes = [p.read_text() for p in (run_dir / "control").glob("note-0-*.txt")]
    assert len(notes) == 1 and "not a private directory" in notes[0]
    assert "Traceback" not in done.stderr


def test_a_rank_asked_by_a_watcher_while_it_exits_ends_cleanly(tmp_path: Path) -> None:
    """A Python handler (ours: groups, point-to-point; torch's stacks) asked once the interpreter finalizes aborts the
    rank ("FATAL: exception not rethrown", SIGABRT): a healthy rank killed at its exit by run's sampler or a watch.
    The hook closes its socket at exit and lets answers in progress end first: every exit is clean."""
    from ncclcheck.collectors.control_hook import GROUPS
    from ncclcheck.collectors.control_hook_p2p import HANDLER as P2P
    from ncclcheck.collectors.control_plane import ask, sockets_in
    from ncclcheck.commands.run.control import prepare, with_hook

    setting, hook_dir, _ = prepare(RunDir(str(tmp_path / "run")), True)
    assert setting is not None and hook_dir is not None
    env = with_hook({**os.environ, setting.names[0]: setting.value, "LIVE_S": "0.5"}, hook_dir)
    for attempt in range(3):
        rank = subprocess.Popen(
            [sys.executable, str(WORKERS / "asked_at_exit.py")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            assert rank.stdout is not None and rank.stdout.readline().strip() == b"ready"
            where = sockets_in(setting.value)[0]
            answered = 0
            while rank.poll() is None:
                for handler in (GROUPS, P2P):
                    try:
                        ask(where, handler, 1.0)
                        answered += 1
                    except OSError:
                        pass
            _, err = rank.communicate(timeout=30)
        finally:
            rank.kill()
        assert answered and rank.returncode == 0, (attempt, answered, rank.returncode, err.decode()[-2000:])


def test_a_child_forked_by_a_rank_leaves_the_rank_s_socket_when_it_exits(tmp_path: Path) -> None:
    """The hook's exit handler is inherited by a child the rank forks; run in the child, it must not remove the
    rank's socket (the rank would then answer nobody for the rest of the job)."""
    from ncclcheck.collectors.control_hook import GROUPS
    from ncclcheck.collectors.control_plane import ask, sockets_in
    from ncclcheck.commands.run.control import prepare, with_hook

    setting, hook_dir, _ = prepare(RunDir(str(tmp_path / "run")), True)
    assert setting is not None and hook_dir is not None
    env = {**os.environ, setting.names[0]: setting.value, "LIVE_S": "30", "FORK_CHILD": "1"}
    rank = subprocess.Popen(
        [sys.executable, str(WORKERS / "asked_at_exit.py")], env=with_hook(env, hook_dir), stdout=subprocess.PIPE
    )
    try:
        assert rank.stdout is not None
        assert [rank.stdout.readline().strip() for _ in range(2)] == [b"ready", b"forked"]
        where = sockets_in(setting.value)[0]
        assert os.path.exists(where) and json.loads(ask(where, GROUPS, 5.0))["0"]["ranks"] == [0]
    finally:
        rank.kill()
        rank.wait()
