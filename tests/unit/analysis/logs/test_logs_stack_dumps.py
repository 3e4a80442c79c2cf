"""``ncclcheck logs`` on pasted stack dumps: the real pastes of public threads (tests/fixtures/pyspy_dumps, with their
INDEX), real py-spy dumps of the zoo's hung gloo ranks (tests/fixtures/pyspy_text, tools/record_dumps.py), and
shapes written here that no rule was written for."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.stack_dumps import read
from ncclcheck.analysis.logs.stack_verdict import judge, stood
from ncclcheck.analysis.logs.verdict import with_hangs, with_stacks
from ncclcheck.model.findings import Finding
from ncclcheck.model.log_report import LogReport
from ncclcheck.model.run import HangRecord
from ncclcheck.model.stack_dumps import Stood

SHARED = FIXTURES / "pyspy_dumps"
REAL = FIXTURES / "pyspy_text"


def judged(text: str, name: str = "paste.txt") -> tuple[tuple[Stood, ...], tuple[Finding, ...]]:
    dump = read(text.splitlines(), name)
    return judge([dump] if dump else [])


def of(path: Path) -> tuple[tuple[Stood, ...], tuple[Finding, ...]]:
    return judged(path.read_text(), path.name)


# the INDEX's diagnosis of each shared paste: (the places of the processes judged, the finding, who it names)
SHARED_TRUTH = {
    "S01": ({"collective", "dataloader"}, "stacks-straggler", "trace-jean-zay-iam52 #9"),
    "S02": ({"backward"}, "stacks-one", None),
    "S03": ({"unknown", "elsewhere"}, "stacks-one", None),
    "S04": ({"elsewhere"}, "stacks-one", None),
    "S05": (set(), "stacks-unreadable", None),
    "S06": ({"launcher"}, "stacks-not-ranks", None),
    "S07": ({"idle-worker"}, "stacks-not-ranks", None),
    "S08": ({"cuda-sync"}, "stacks-one", None),
}


@pytest.mark.parametrize("key", sorted(SHARED_TRUTH))
def test_each_shared_paste_gives_the_state_its_index_says(key: str) -> None:
    path = next(SHARED.glob(f"{key}_*.txt"))
    places, findings = of(path)
    want_places, want_id, named = SHARED_TRUTH[key]
    assert {s.place for s in places} == want_places, [(s.place, s.words) for s in places]
    assert [f.id for f in findings] == [want_id], [f.message for f in findings]
    finding = findings[0]
    if named is None:  # the stacks single nobody out: never an error, never the network
        assert finding.severity == "warning" and not finding.culprits
        assert "transport" not in finding.message and "network" not in finding.message
    else:
        assert finding.severity == "error" and finding.message.startswith(named), finding.message


def test_the_shared_pastes_details_are_read() -> None:
    places, findings = of(next(SHARED.glob("S01_*.txt")))
    odd = next(s for s in places if s.place == "dataloader")
    assert odd.thread is not None and odd.thread.tid == "1439102" and odd.site and "pipe/engine.py:631" in odd.site
    assert len([s for s in places if s.place == "collective"]) == 39  # the listing's other names, each a process
    assert findings[0].evidence[0].line == 57  # the full stack's header
    places, _ = of(next(SHARED.glob("S03_*.txt")))
    tp6 = next(s for s in places if s.place == "elsewhere")
    assert tp6.process.pid == 309 and "sglang::scheduler_TP6" in tp6.process.label and "busy in _apply" in tp6.words
    assert tp6.thread is not None and len(tp6.thread.frames) == 7  # the blank prefixed line inside the stack kept
    places, findings = of(next(SHARED.glob("S06_*.txt")))
    launcher = places[0].process
    assert launcher.command is not None and launcher.command.endswith("output/returnn.config")  # its 3 lines joined
    assert [pid for pid, gone in launcher.children if gone] == [2834, 2836, 2837]
    assert "PID 2835 alive" in findings[0].message
    places, _ = of(next(SHARED.glob("S08_*.txt")))
    assert places[0].certain is False and "copy_to_device" in places[0].words  # by the function's name alone


# real py-spy dumps of the zoo's hung ranks: (finding, what the culprit's words hold; None: nobody named)
REAL_TRUTH = {
    "late-init": ("stacks-straggler", "idle in wait_for_file (zoo.py:41)"),
    "dl-stuck": ("stacks-straggler", "waits on its DataLoader's workers at zoo.py:215"),
    "lock-held": (
        "stacks-straggler",
        "waits on a lock in lock_held (zoo.py:254), in no collective; its other threads: ",
    ),
    "compute": ("stacks-straggler", "busy in spin (zoo.py:348)"),
    "group-subset": ("stacks-straggler", "waits in all_reduce at zoo.py:72 (group_subset)"),
    "if-rank0": ("stacks-waiting", None),
    "sub-mismatch": ("stacks-waiting", None),
    "p2p-cycle": ("stacks-waiting", None),
}


@pytest.mark.parametrize("case", sorted(REAL_TRUTH))
def test_real_dumps_of_the_zoo_name_the_rank_the_others_wait_for_and_nobody_where_the_stacks_cannot(case: str) -> None:
    places, findings = of(REAL / f"{case}.txt")
    want, words = REAL_TRUTH[case]
    assert all(s.process.pid is not None for s in places) and len(places) >= 2
    assert [f.id for f in findings] == [want], [f.message for f in findings]
    if words is None:
        assert findings[0].severity == "warning" and not findings[0].culprits
        assert "transport" not in findings[0].message  # a code bug (order, mismatch, cycle) never sent to the network
        return
    culprit = [s for s in places if words in s.words]
    assert len(culprit) == 1 and findings[0].message.startswith(f"PID {culprit[0].process.pid} "), findings[0].message


def test_a_rank_past_a_group_s_creation_is_named_with_the_call_it_skipped() -> None:
    _, findings = of(REAL / "group-subset.txt")
    assert "not in new_group, which every rank of the world calls" in findings[0].message
    assert "members or not" in findings[0].fix


def test_a_point_to_point_cycle_is_never_sent_to_the_transport() -> None:
    _, findings = of(REAL / "p2p-cycle.txt")
    assert "point-to-point" in findings[0].message and "transport" not in findings[0].message


def test_a_native_dump_reads_c10d_s_wait_and_the_lock_under_the_with() -> None:
    places, _ = of(REAL / "lock-held.txt")
    waiting = next(s for s in places if s.place == "collective")
    assert waiting.thread is not None and waiting.op == "all_reduce" and any(f.native for f in waiting.thread.frames)


def rank_dump(rank: int, pid: int, frames: str, state: str = "idle", name: str = "MainThread") -> str:
    body = "\n".join(f"    {f}" for f in frames.strip().splitlines())
    return (
        f"Process {pid}: /usr/bin/python3 -u train.py --epochs 3\nPython v3.10.12 (/usr/bin/python3.10)\n\n"
        f'Thread {pid} ({state}): "{name}"\n{body}\n'
    )


ALL_REDUCE = """
all_reduce (torch/distributed/distributed_c10d.py:2050)
wrapper (torch/distributed/c10d_logger.py:72)
step (train.py:88)
<module> (train.py:120)
"""
LOADER = """
wait (threading.py:324)
get (queue.py:180)
_try_get_data (torch/utils/data/dataloader.py:1133)
_get_data (torch/utils/data/dataloader.py:1294)
_next_data (torch/utils/data/dataloader.py:1332)
__next__ (torch/utils/data/dataloader.py:631)
<module> (train.py:117)
"""


def test_prefixed_concatenated_dumps_with_a_rank_on_its_data_loader_name_that_rank() -> None:
    paste = "".join(
        "".join(f"[rank{r}]:{line}\n" for line in rank_dump(r, 100 + r, LOADER if r == 2 else ALL_REDUCE).splitlines())
        for r in range(4)
    )
    places, findings = judged(paste)
    assert [s.process.rank for s in places] == [0, 1, 2, 3]
    assert [f.id for f in findings] == ["stacks-straggler"] and findings[0].culprits == (2,)
    assert findings[0].ranks == (0, 1, 2, 3) and "DataLoader" in findings[0].message


def test_must_not_every_rank_in_the_same_collective_names_nobody_and_a_healthy_tie_neither() -> None:
    paste = "".join(rank_dump(r, 100 + r, ALL_REDUCE) for r in range(4))
    places, findings = judged(paste)
    assert {s.place for s in places} == {"collective"}
    assert [f.id for f in findings] == ["stacks-waiting"] and not findings[0].culprits
    assert findings[0].severity == "warning"
    # two ranks each outside any collective (a job between steps): nobody waits on anybody, nothing is named
    idle = "".join(rank_dump(r, 100 + r, "sleep (train.py:40)\n<module> (train.py:120)") for r in range(2))
    places, findings = judged(idle)
    assert {s.place for s in places} == {"elsewhere"} and findings == ()


def test_a_rank_at_a_cuda_synchronisation_waits_with_the_others_it_is_no_straggler() -> None:
    synced = """
    cudaStreamSynchronize (libcudart.so.12)
    at::native::_local_scalar_dense_cuda (libtorch_cuda.so)
    step (train.py:91)
    <module> (train.py:120)
    """
    python_sync = "synchronize (torch/cuda/__init__.py:801)\nstep (train.py:90)\n<module> (train.py:120)"
    paste = rank_dump(0, 100, ALL_REDUCE) + rank_dump(1, 101, synced, "active") + rank_dump(2, 102, python_sync)
    places, findings = judged(paste)
    assert [s.place for s in places] == ["collective", "cuda-sync", "cuda-sync"]
    assert all(s.certain for s in places) and "cudaStreamSynchronize" in places[1].words
    assert [f.id for f in findings] == ["stacks-waiting"] and not findings[0].culprits


def test_main_thread_in_backward_with_an_unnamed_thread_in_a_collective_waits_in_it() -> None:
    paste = (
        rank_dump(0, 100, "backward (torch/autograd/__init__.py:266)\nstep (train.py:80)\n<module> (train.py:120)")
        + "Thread 4079 (active)\n"
        + "    all_reduce (torch/distributed/distributed_c10d.py:2050)\n"
        + "    reduce_hook (deepspeed/runtime/zero/stage3.py:1200)\n"
        + "Thread 4080 (idle)\n"
        + rank_dump(1, 101, ALL_REDUCE)
    )
    places, findings = judged(paste)
    assert [(s.place, s.op) for s in places] == [("collective", "all_reduce"), ("collective", "all_reduce")]
    assert "unnamed thread 4079" in places[0].words and findings[0].id == "stacks-waiting"


def test_must_not_a_busy_main_thread_hides_behind_a_helper_thread_in_a_collective() -> None:
    busy = (
        rank_dump(0, 100, "spin (train.py:30)\n<module> (train.py:120)", "active")
        + 'Thread 4079 (idle): "heartbeat"\n    barrier (torch/distributed/distributed_c10d.py:4000)\n'
        + rank_dump(1, 101, ALL_REDUCE)
    )
    places, findings = judged(busy)
    assert places[0].place == "elsewhere" and findings[0].id == "stacks-straggler"
    assert findings[0].message.startswith("PID 100 busy in spin")


def test_faulthandler_and_gdb_dumps_find_the_main_thread_by_its_module_frame() -> None:
    faulthandler = """
Thread 0x00007f05a700ab80 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 320 in wait
  File "/usr/lib/python3.10/threading.py", line 600 in wait
  File "/srv/job/prefetch.py", line 12 in run

Thread 0x00007f0588e376c0 (most recent call first):
  File "/env/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3252 in broadcast
  File "/srv/job/train.py", line 50 in sync_params
  File "/srv/job/train.py", line 99 in <module>
"""
    places, findings = judged(faulthandler, "stacks_rank3.txt")
    assert [(s.place, s.op, s.process.rank) for s in places] == [("collective", "broadcast", 3)]
    assert findings[0].id == "stacks-one" and findings[0].ranks == (3,)
    gdb = """(gdb) py-bt
Traceback (most recent call first):
  <built-in method _local_scalar_dense of PyCapsule object at remote 0x7f00>
  File "/srv/job/train.py", line 77, in log_loss
    print(loss.item())
  File "/srv/job/train.py", line 99, in <module>
    log_loss(loss)
"""
    places, _ = judged(gdb)
    assert [s.place for s in places] == ["elsewhere"] and "log_loss (/srv/job/train.py:77)" in places[0].words


def test_must_not_a_python_traceback_in_a_log_is_a_dump() -> None:
    log = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/srv/job/train.py", line 99, in <module>
[rank1]:     main()
[rank1]:   File "/srv/job/train.py", line 50, in main
[rank1]:     dist.all_reduce(t)
[rank1]: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error
Process 12 exited: see above
"""
    assert read(log.splitlines(), "rank1.log") is None


def test_a_failed_dump_is_evidence_and_a_grouped_header_list_is_one_process_each() -> None:
    paste = (
        rank_dump(0, 100, ALL_REDUCE)
        + "$ py-spy dump --pid 101\nError: Failed to suspend process\nReason: EPERM: Operation not permitted\n"
        + "2 in:\n"
        + 'Thread 102 (idle): "MainThread"\nThread 103 (idle): "MainThread"\n'
        + "".join(f"    {f}\n" for f in ALL_REDUCE.strip().splitlines())
    )
    places, findings = judged(paste)
    assert [(s.place, s.process.pid) for s in places] == [
        ("collective", 100),
        ("unreadable", 101),
        ("collective", None),
        ("collective", None),
    ]
    assert "EPERM" in places[1].words and findings[0].id == "stacks-straggler"
    assert findings[0].message.startswith("PID 101 could not be dumped") and "uninterruptible" in findings[0].fix


def test_hex_thread_ids_tabs_trailing_spaces_and_a_wrapped_ray_frame() -> None:
    old = 'Thread 0x7F4AA36D9700 (active): "MainThread"   \n\tspin (train.py:30)    \n\t<module> (train.py:120)  \n'
    places, _ = judged(old)
    assert places[0].thread is not None and places[0].thread.tid == "0x7F4AA36D9700" and places[0].place == "elsewhere"
    ray = (
        "(RayWorker pid=811) Thread 0x00007f0588e376c0 (most recent call first):\n"
        '(RayWorker pid=811)   File "/env/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line '
        "3252 in all_gather\n"
        '(RayWorker pid=811)   File "/usr/lib/python3.10/thread\n'
        '(RayWorker pid=811) ing.py", line 973 in _bootstrap\n'
    )
    places, _ = judged(ray)
    frames = places[0].thread.frames if places[0].thread else ()
    assert [f.function for f in frames] == ["all_gather", "_bootstrap"] and places[0].op == "all_gather"


def test_a_crash_dump_is_the_crash_s_place_not_a_wait() -> None:
    crash = """Fatal Python error: Segmentation fault

Current thread 0x00007f73b3087b80 (most recent call first):
  File "/srv/job/ext.py", line 9 in kernel
  File "/srv/job/train.py", line 99 in <module>
"""
    places, findings = judged(crash)
    assert [s.place for s in places] == ["crashed"] and findings == ()
    assert "Segmentation fault" in places[0].words and "/srv/job/ext.py:9" in places[0].words


def test_a_stack_instant_never_outweighs_a_hang_seen_live_nor_an_error_of_its_own() -> None:
    places, findings = of(REAL / "compute.txt")
    base = LogReport((), (), (), (), None, 10)
    report = with_stacks(base, places, findings)
    assert report.root_cause is not None and report.root_cause.id == "stacks-straggler" and report.status == "fail"
    hang = HangRecord("h.json", 1.0, ("straggler",), (0, 1), (1,), "rank 1 is not in any collective", "node0")
    assert with_hangs(report, (hang,)).root_cause.id == "hang-recorded"  # type: ignore[union-attr]
    nic = Finding("nccl-ib-error", "error", "NET/IB: completion error", ranks=(3,))
    logged = LogReport((nic,), (), (), (), nic, 10)
    assert with_stacks(logged, places, findings).root_cause == nic
    alone = with_stacks(base, *of(next(SHARED.glob("S04_*.txt"))))
    assert alone.status == "unknown" and alone.root_cause is None  # one instant of one process: never a pass
    garbled = with_stacks(base, *of(next(SHARED.glob("S05_*.txt"))))
    assert garbled.stacks == () and garbled.status == "unknown"  # stacks there but unreadable: never a pass either


def test_stood_is_the_same_reading_for_a_process_read_twice() -> None:
    dump = read((REAL / "dl-stuck.txt").read_text().splitlines(), "dl-stuck.txt")
    assert dump is not None and [stood(p) for p in dump.processes] == [stood(p) for p in dump.processes]


def test_a_big_log_is_read_around_its_dumps_with_their_true_line_numbers() -> None:
    from ncclcheck.sources.logs import WHOLE_TEXT, _stacks

    filler = "".join(f"[rank0]: step {i} loss 0.{i % 97:02d} lr 3e-4 tokens/s 91234\n" for i in range(200_000))
    assert len(filler) > WHOLE_TEXT
    paste = (REAL / "dl-stuck.txt").read_text()
    text = filler + paste + filler
    found = _stacks(text, "train.log")
    places = [s for d in found for s in judge([d])[0]]
    assert [s.place for s in places] == ["collective", "dataloader"]
    header = filler.count("\n") + paste.splitlines().index('Thread 11221 (idle): "MainThread"') + 1
    assert places[1].thread is not None and places[1].thread.line == header
    assert _stacks(filler * 2, "quiet.log") == []  # no dump: nothing read beyond the search for its marks
