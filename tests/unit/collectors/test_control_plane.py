"""The control plane, pure: live Flight Recorder answers recorded from real jobs (tests/fixtures/control_plane, see
its INDEX.md) judged across groups; the hook's socket path and its running of the user's own sitecustomize."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path
from typing import Any

import conftest
import pytest
from rich.console import Console
from watch_states import job

from ncclcheck.analysis.watch.flight import culprits, exact
from ncclcheck.analysis.watch.judge import Judging
from ncclcheck.cli import main
from ncclcheck.collectors import control_hook
from ncclcheck.collectors.control_plane import RankAnswer
from ncclcheck.collectors.flight import load, parse
from ncclcheck.commands.run import control
from ncclcheck.model.findings import Finding
from ncclcheck.model.flight import FrDump
from ncclcheck.model.run import HangRecord, RunDir
from ncclcheck.model.watch import Verdict, WatchState
from ncclcheck.sources import watch as watch_source
from ncclcheck.sources.watch import LiveSource

FIXTURES = conftest.FIXTURES / "control_plane"


def dumps(name: str, leave_out: int | None = None) -> list[FrDump]:
    out = [load(str(p)) for p in sorted((FIXTURES / name).glob("fr_rank*.json"))]
    assert out and all(isinstance(d, FrDump) for d in out)
    return [d for d in out if isinstance(d, FrDump) and d.rank != leave_out]


def errors(name: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(f.id, f.culprits) for f in exact(dumps(name)) if f.severity == "error"]


def test_a_rank_that_skips_its_pairs_collective_is_named_not_its_waiting_partner() -> None:
    found = exact(dumps("subgroup_skip"))
    assert culprits(found) == (3,)
    first = found[0]
    assert first.id == "fr-not-joined" and first.severity == "error"
    assert "process group 2, collective #4" in first.message
    assert "rank 3 never joined it: it waits in barrier #4 of process group 0" in first.message
    # the world barrier rank 2 is missing from is explained by its wait: said, but nobody blamed for it
    explained = [f for f in found if "process group 0" in f.message.split(":")[0]]
    assert [(f.severity, f.culprits) for f in explained] == [("info", ())]
    assert all(2 not in f.culprits for f in found)


def test_healthy_subgroups_give_no_finding() -> None:
    assert exact(dumps("healthy_subgroups")) == ()


def test_op_mismatch_at_the_same_collective_names_the_odd_rank() -> None:
    assert errors("op_mismatch") == [("fr-op-mismatch", (3,))]


def test_two_ranks_waiting_on_each_other_across_groups_is_a_tie() -> None:
    found = exact(dumps("swap_tie"))
    assert [(f.id, f.culprits) for f in found if f.severity == "error"] == [("fr-not-joined", ())]
    assert culprits(found) == () and "nobody can be named" in found[0].message


def test_a_silent_rank_is_named_and_the_rest_judged_without_blaming_its_partner() -> None:
    found = exact(dumps("subgroup_skip", leave_out=3), silent={3: "TimeoutError: timed out"})
    ids = {f.id: f for f in found}
    assert "control-silent" in ids and ids["control-silent"].ranks == (3,)
    assert "within 1 s" in ids["control-silent"].message
    assert "fr-dumps-missing" not in ids  # said once, as not answering
    assert ids["fr-not-joined"].culprits == ()  # rank 2 waits for rank 3, whose part nobody saw
    assert culprits(found) == ()


def test_a_healthy_rank_silent_is_named_and_nothing_else() -> None:
    found = exact(dumps("healthy_subgroups", leave_out=1), silent={1: "ConnectionRefusedError"})
    assert [(f.id, f.severity) for f in found] == [("control-silent", "warning")]


@pytest.mark.parametrize("raw", [b"", b"{not json", b"[1, 2]", b'{"entries": 3}', b"\x80\x04K\x01."])
def test_a_garbled_answer_is_one_clear_reason(raw: bytes) -> None:
    got = parse("rank2.sock:fr_trace_json", 2, raw)
    assert not isinstance(got, FrDump)
    assert got.rank == 2 and "\n" not in got.reason and "Traceback" not in got.reason
    found = exact([], [got])
    assert "fr-dump-unreadable" in [f.id for f in found]


def test_socket_path_falls_back_to_a_short_private_dir_past_the_unix_limit() -> None:
    short = "/tmp/run/control"
    assert control_hook.socket_path(short, 3) == "/tmp/run/control/rank3.sock"
    long_dir = "/" + "d" * 120 + "/control"
    path = control_hook.socket_path(long_dir, 12345)
    assert len(path.encode()) <= control_hook.SUN_PATH_MAX
    assert path.startswith("/tmp/ncclcheck-") and path.endswith("/rank12345.sock")
    assert path == control_hook.socket_path(long_dir, 12345)  # run and watch find it again without asking


def test_the_users_own_sitecustomize_runs_once_and_stays_importable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir(), theirs.mkdir()
    (ours / "sitecustomize.py").write_text("# ours\n")
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.RUNS = getattr(builtins, 'RUNS', 0) + 1\n")
    monkeypatch.setattr(sys, "path", [str(ours), str(theirs), *sys.path])
    monkeypatch.delitem(sys.modules, "sitecustomize", raising=False)
    import builtins

    monkeypatch.setattr(builtins, "RUNS", 0, raising=False)
    control_hook.run_theirs(str(ours))
    assert builtins.RUNS == 1  # type: ignore[attr-defined]
    assert sys.modules["sitecustomize"].__file__ == str(theirs / "sitecustomize.py")


def test_a_failing_user_sitecustomize_is_reported_as_site_does_and_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sitecustomize.py").write_text("raise RuntimeError('broken on purpose')\n")
    monkeypatch.setattr(sys, "path", ["/nonexistent-ours", str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "sitecustomize", raising=False)
    control_hook.run_theirs("/nonexistent-ours")
    err = capsys.readouterr().err
    assert "Error in sitecustomize" in err and "broken on purpose" in err


def test_without_a_control_dir_the_hook_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(control_hook.CONTROL_DIR, raising=False)
    before = list(sys.meta_path)
    monkeypatch.setattr(control_hook, "run_theirs", lambda here: None)
    control_hook.main()
    assert sys.meta_path == before


def answers(name: str, silent: tuple[int, ...] = ()) -> list[RankAnswer]:
    out = []
    for path in sorted((FIXTURES / name).glob("fr_rank*.json")):
        rank = int(path.stem[len("fr_rank") :])
        if rank in silent:
            out.append(RankAnswer(rank, f"/x/rank{rank}.sock", (("fr_trace_json", None),), "TimeoutError: timed out"))
            continue
        stacks = FIXTURES / name / f"stacks_rank{rank}.txt"
        bodies = (("fr_trace_json", path.read_bytes()), ("dump_nccl_trace_json", None))
        out.append(RankAnswer(rank, f"/x/rank{rank}.sock", (*bodies, ("dump_traceback", stacks.read_bytes()))))
    return out


def hang_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    stack_vote: tuple[int, ...],
    silent: tuple[int, ...] = (),
) -> tuple[HangRecord, dict[str, Any], str]:
    (tmp_path / "control").mkdir()
    (tmp_path / "hangs").mkdir()
    hang = tmp_path / "hangs" / "hang-1-1.json"
    hang.write_text(json.dumps({"schema": "ncclcheck.watch/2", "findings": []}))
    monkeypatch.setattr(control, "sockets_in", lambda d: {a.rank: a.socket for a in answers(name)})
    monkeypatch.setattr(control, "fetch", lambda sockets: answers(name, silent))
    out = io.StringIO()
    record = HangRecord(str(hang), 0.0, ("mismatch",), (2, 3), stack_vote, "the stacks' vote")
    got = control.on_hang(RunDir(str(tmp_path)), record, Console(file=out, width=300))
    return got, json.loads(hang.read_text()), out.getvalue()


def test_run_overrides_a_wrong_stack_vote_with_the_flight_recorders_culprit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, written, said = hang_on(tmp_path, monkeypatch, "subgroup_skip", stack_vote=(2,))
    assert got.culprits == (3,) and got.kinds == ("fr-not-joined", "mismatch") and "rank 3 never joined" in got.message
    assert written["control_plane"]["culprits"] == [3] and written["control_plane"]["answered"] == [0, 1, 2, 3]
    fetched = tmp_path / "control" / "hang-1-1"
    assert sorted(p.name for p in fetched.iterdir()) == sorted(
        ["answers.json", *(f"live_fr_rank{r}.json" for r in range(4)), *(f"live_stacks_rank{r}.txt" for r in range(4))]
    )
    assert "rank 0-3 answered" in said


def test_run_keeps_the_stacks_finding_where_the_flight_recorders_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, written, _ = hang_on(tmp_path, monkeypatch, "subgroup_skip", stack_vote=(3,))
    assert got.kinds == ("mismatch",) and got.message == "the stacks' vote" and got.culprits == (3,)
    assert written["control_plane"]["culprits"] == [3]


def test_run_keeps_the_stacks_vote_where_the_flight_recorders_name_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, written, said = hang_on(tmp_path, monkeypatch, "subgroup_skip", stack_vote=(2,), silent=(3,))
    assert got.culprits == (2,) and got.kinds == ("mismatch",)
    assert written["control_plane"]["silent"] == {"3": "TimeoutError: timed out"}
    assert "rank 3 did not answer within 1 s" in said


def test_watch_puts_the_exact_finding_first_only_where_it_names_another_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    source = LiveSource.__new__(LiveSource)  # no sampler: only the seam is under test
    source.job, source.asked, source.exact, source.flight = job(4), (), (), ()
    source.judging = Judging(10.0)
    asked: list[int] = []

    def live(pids: dict[int, int]) -> tuple[list[FrDump], list[Any], dict[int, str]]:
        asked.append(len(pids))
        return dumps("subgroup_skip"), [], {}

    monkeypatch.setattr(watch_source, "live_flight", live)
    vote = Finding("mismatch", "error", "rank 2 is in all_reduce, the others in barrier", ranks=(2,), culprits=(2,))
    state = WatchState(0.0, job(4), (), (vote,), Verdict("problem", "hang"))
    seen = source.with_flight(state)
    assert seen.findings[0].id == "fr-not-joined" and seen.findings[0].culprits == (3,) and seen.findings[-1] == vote
    assert seen.verdict.message.startswith("✗ fr-not-joined, mismatch"), seen.verdict  # the top line says it first
    source.with_flight(state)
    assert asked == [4]  # asked once per stall
    agree = dataclasses.replace(vote, culprits=(3,))
    assert source.with_flight(dataclasses.replace(state, findings=(agree,))).findings == (agree,)
    calm = dataclasses.replace(state, findings=())
    assert source.with_flight(calm) == calm and source.asked == () and source.flight == ()


def test_logs_judges_recorded_live_answers_as_it_judges_dumps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "--json", str(FIXTURES / "subgroup_skip")]) == 1
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert (verdict["root_cause"], verdict["culprits"]) == ("fr-not-joined", [3])


def test_logs_reads_a_hang_s_live_answers_only_when_given_that_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fetched = tmp_path / "run" / "control" / "hang-1-1"
    fetched.mkdir(parents=True)
    for path in (FIXTURES / "subgroup_skip").glob("fr_rank*.json"):
        (fetched / f"live_{path.name}").write_bytes(path.read_bytes())
    (tmp_path / "run" / "launcher.log").write_text("hello\n")
    main(["logs", "--json", str(tmp_path / "run")])
    assert json.loads(capsys.readouterr().out)["verdict"]["root_cause"] is None  # the hang record speaks for them
    main(["logs", "--json", str(fetched)])
    assert json.loads(capsys.readouterr().out)["verdict"]["culprits"] == [3]


def node_lines(node: int, flight: list[FrDump] | None) -> list[str]:
    """Node ``node`` of the 4-rank pairs job (ranks 2n, 2n+1) as its agent writes it: ranks 0, 1 and 3 in the world
    barrier and rank 2 in its pair's all_reduce, standing still 12 s; ``flight``: the recorders it sends."""
    from watch_states import sample, stack, states

    from ncclcheck.model.agent_line import agent_line

    first = 2 * node
    rounds = [
        {r: sample(r, stack("all_reduce" if r == 2 else "barrier", 84 if r == 2 else 85)) for r in (first, first + 1)}
    ]
    state = states(job(4, 2, node), *(rounds * 4), every=4.0)
    sent: dict[int, Any] = {}
    line = agent_line(state, f"node{node}", sent, 1_800_000_000.0, 0, flight=flight)
    return [json.dumps(line), json.dumps(agent_line(state, f"node{node}", sent, 1_800_000_001.0, 1))]


def test_the_recorders_agents_send_are_judged_job_wide_and_kept_until_a_new_one() -> None:
    from ncclcheck.collectors.agent_streams import Streams
    from ncclcheck.sources.watch_nodes import NodesSource

    recorders = dumps("subgroup_skip")
    streams, bare = Streams(), Streams()
    for node in (0, 1):
        mine = [d for d in recorders if d.rank // 2 == node]
        for line in node_lines(node, mine):  # the second line sends none: the first one's still hold
            streams.add_line(line, -1)
        for line in node_lines(node, None):
            bare.add_line(line, -1)
    assert {r.host: len(r.flight) for r in streams.reports.values()} == {"node0": 2, "node1": 2}
    seen = NodesSource(10.0, 1.5, recorded=streams).poll(final=True)
    first = seen.findings[0]
    assert (first.id, first.culprits) == ("fr-not-joined", (3,)) and seen.verdict.message.startswith("✗ fr-not-joined")
    without = NodesSource(10.0, 1.5, recorded=bare).poll(final=True)
    assert not any(f.id.startswith("fr-") for f in without.findings) and 3 not in without.findings[0].culprits
    cleared = Streams()
    for line in node_lines(0, recorders[:2]) + node_lines(0, []):  # a stall over: the agent sends an empty list
        cleared.add_line(line, -1)
    assert cleared.reports["node0"].flight == ()


def test_an_agent_s_recorder_keeps_each_group_s_last_entries_and_reads_back_whole() -> None:
    from ncclcheck.model.flight import dump_from_json, dump_to_json

    dump = dumps("subgroup_skip")[2]
    assert dump_from_json(json.loads(json.dumps(dump_to_json(dump)))) == dump  # a few entries a group: all kept
    kept = dump_from_json(dump_to_json(dump, tail=1))
    assert kept is not None and len(kept.entries) == len({(e.pg, e.is_p2p) for e in dump.entries})
    assert dump_from_json({"rank": "x"}) is None and dump_from_json([1]) is None


def test_the_groups_each_rank_wrote_are_read_from_its_control_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``groups-rank<N>.json`` (the hook's, in pg_config's layout) of each rank, found through its environment;
    a file that is not there, half written or garbled adds nothing and raises nothing."""
    from ncclcheck.collectors import control_plane

    config = {
        "0": {"name": "0", "desc": "default_pg", "ranks": [0, 1, 2, 3]},
        "1": {"name": "1", "desc": "undefined", "ranks": [0, 1]},
    }
    (tmp_path / "groups-rank0.json").write_text(json.dumps(config))
    (tmp_path / "groups-rank2.json").write_text(json.dumps({"2": {"name": "2", "ranks": [2, 3]}}))
    (tmp_path / "groups-rank1.json").write_text('{"1": {"name": "1", "ranks": [0,')  # half written
    (tmp_path / "groups-rank3.json").write_text(json.dumps({"3": {"ranks": ["x"]}}))
    env = {control_hook.CONTROL_DIR: str(tmp_path)}
    monkeypatch.setattr(control_plane, "environ", lambda pid: env if pid != 105 else {})
    got = control_plane.live_groups({0: 100, 1: 101, 2: 102, 3: 103, 4: 104, 5: 105})
    assert got == (frozenset({0, 1}), frozenset({0, 1, 2, 3}), frozenset({2, 3}))
    assert control_plane.live_groups({5: 105}) == ()


def test_a_python_handler_is_asked_only_through_run_s_own_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only run's server closes before a rank's interpreter finalizes (a Python handler asked then aborts the rank):
    ``ours`` finds a rank's socket only where the hook's record says the server is ncclcheck's; without it, the
    job's own server (a debug server's url, worker_main's socket) is found as before. No record, nothing of ours."""
    from ncclcheck.collectors import control_plane

    records = {
        0: {"socket": str(tmp_path / "rank0.sock"), "owner": "ncclcheck"},
        1: {"socket": None, "url": "http://localhost:4242", "owner": "job"},
        2: {"socket": str(tmp_path / "theirs.sock"), "owner": "job"},
    }
    for rank, record in records.items():
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({"rank": rank, **record}))
    monkeypatch.setattr(
        control_plane, "environ", lambda pid: {control_hook.CONTROL_DIR: str(tmp_path), "RANK": str(pid - 100)}
    )
    assert control_plane.socket_of(100, ours=True) == str(tmp_path / "rank0.sock")
    assert control_plane.socket_of(101, ours=True) is None and control_plane.socket_of(102, ours=True) is None
    assert control_plane.socket_of(103, ours=True) is None  # no record yet
    assert control_plane.socket_of(101) == "http://localhost:4242"
    assert control_plane.socket_of(102) == str(tmp_path / "theirs.sock")
    assert control_plane.socket_of(103) == control_hook.socket_path(str(tmp_path), 3)


def test_live_recorders_take_their_groups_from_the_files_never_from_the_handler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live look asks only torch's recorders (C++), and joins each rank's groups as the rank wrote them."""
    from ncclcheck.collectors import control_plane

    asked: list[tuple[str, ...]] = []
    raw = (FIXTURES / "subgroup_skip" / "fr_rank3.json").read_bytes()

    def fetch(sockets: dict[int, str], handlers: tuple[str, ...], timeout: float = 1.0) -> list[RankAnswer]:
        asked.append(tuple(handlers))
        return [
            RankAnswer(r, p, tuple((h, raw if h == "fr_trace_json" else None) for h in handlers), "")
            for r, p in sockets.items()
        ]

    (tmp_path / "groups-rank3.json").write_text(json.dumps({"2": {"name": "2", "ranks": [2, 3]}}))
    monkeypatch.setattr(control_plane, "fetch", fetch)
    monkeypatch.setattr(control_plane, "socket_of", lambda pid, ours=False: f"http://localhost:{pid}")
    monkeypatch.setattr(control_plane, "environ", lambda pid: {control_hook.CONTROL_DIR: str(tmp_path)})
    dumps, _, silent = control_plane.live_flight({3: 103})
    assert asked == [control_plane.RECORDERS] and control_hook.GROUPS not in asked[0] and not silent
    assert [d.rank for d in dumps] == [3] and ("2", (2, 3)) in dumps[0].pg_ranks, dumps[0].pg_ranks


def test_the_hook_writes_a_rank_s_groups_after_each_group_it_is_a_member_of_and_only_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every rank calls new_group for every group (a DeviceMesh of 1,024 tp groups: 1,024 calls per rank); the file is
    written only after a call that gave this rank a group, and torch.distributed's own binding is wrapped too."""
    import types

    outside = object()
    c10d = types.ModuleType("fake_c10d")
    parent = types.ModuleType("torch.distributed")
    c10d.GroupMember = types.SimpleNamespace(NON_GROUP_MEMBER=outside)  # type: ignore[attr-defined]
    c10d.init_process_group = lambda *a, **k: None  # type: ignore[attr-defined]
    c10d.new_group = lambda ranks: object() if 1 in ranks else outside  # type: ignore[attr-defined]
    c10d.split_group = lambda ranks: object() if 1 in ranks else None  # type: ignore[attr-defined]
    parent.new_group = c10d.new_group  # type: ignore[attr-defined]  # bound before the hook came
    written: list[str] = []
    monkeypatch.setitem(sys.modules, "torch.distributed", parent)
    monkeypatch.setattr(control_hook, "publish_groups", written.append)
    monkeypatch.setattr(control_hook, "start_server", lambda control_dir: None)
    monkeypatch.setattr("ncclcheck.collectors.control_hook_p2p.install", lambda module: None)
    control_hook.wrap(c10d, "/ctl")
    c10d.init_process_group()  # type: ignore[attr-defined]
    assert written == ["/ctl"]
    for ranks in ([0, 1], [2, 3], [4, 5], [1, 3]):
        c10d.new_group(ranks)  # type: ignore[attr-defined]
    parent.new_group([2, 3])  # type: ignore[attr-defined]
    c10d.split_group([0, 2])  # type: ignore[attr-defined]
    c10d.split_group([1, 2])  # type: ignore[attr-defined]
    assert written == ["/ctl"] * 4  # init, the two groups of rank 1 by new_group, one by split_group
    assert parent.new_group is c10d.new_group  # type: ignore[attr-defined]
