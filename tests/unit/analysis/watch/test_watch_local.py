"""Inside one rank (``analysis.watch.local``): a wait followed through threads and children to its end; where it
must end, and where it must not say more than the evidence holds. Hand-built evidence, shaped as the collectors
give it (the real recorded kind is replayed in test_zoo_replay.py)."""

from __future__ import annotations

from ncclcheck.analysis.watch.local import follow
from ncclcheck.model.stacks import Frame
from ncclcheck.model.waits import ChildSample, CodeAt, Deep, KernelWait, ThreadSample
from ncclcheck.model.watch import RankSample, RankView

JOB = "/job/train.py"
THREADING = "/usr/lib/python3.11/threading.py"
LOADER = "/env/lib/python3.11/site-packages/torch/utils/data/dataloader.py"
WORKER = "/env/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py"
C10D = "/env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
FUTEX = KernelWait("futex", "futex_do_wait")
SLEEP = KernelWait("clock_nanosleep", "hrtimer_nanosleep")


def view(
    stack: tuple[Frame, ...], deep: Deep | None = None, cpu: float | None = 0.0, rank: int = 1, status: str = "sleeping"
) -> RankView:
    sample = RankSample(rank, rank, 4000 + rank, "node0", status, 0.0, 1 << 20, 4, 1.0, 0, stack, None, deep=deep)
    return RankView(sample, None, f"{JOB}:{stack[0].line} (x)", "x", 20, 20, 20, 20, 9, cpu, False, held_s=20)


def at(line: int, function: str = "main") -> Frame:
    return Frame(function, JOB, line)


def code(line: int, text: str, **facts: object) -> CodeAt:
    return CodeAt(JOB, line, text, **facts)  # type: ignore[arg-type]


def thread(tid: int, name: str, *frames: Frame, kernel: KernelWait | None = None, locals_=()) -> ThreadSample:
    return ThreadSample(tid, name, frames, kernel, locals_)


def test_a_lock_held_by_a_sleeping_thread_is_followed_to_the_sleep() -> None:
    flusher = thread(7, "flusher", at(14, "flusher"), kernel=SLEEP)
    deep = Deep(
        FUTEX,
        (flusher,),
        code=(
            code(20, "with stats_lock:", enters=("stats_lock",), fillers=(("stats_lock", ("flusher",)),)),
            code(14, "time.sleep(3600)", function="flusher", holds=("stats_lock",), calls=("time.sleep",)),
        ),
    )
    followed = follow(view((at(20),), deep))
    assert followed is not None and followed.end == "sleeping"
    assert [h.who for h in followed.hops] == ["rank 1", "rank 1's thread flusher"]
    assert "lock `stats_lock`, held by thread flusher" in followed.hops[0].what
    assert followed.fix_class == "lock"  # a lock held across a sleep: the lock's fix, not the sleep's


def test_must_not_a_rank_in_a_collective_or_without_a_stack_is_not_followed_here() -> None:
    assert follow(view((Frame("all_reduce", C10D, 3252), at(40)))) is None
    empty = view((at(1),))
    assert (
        follow(
            RankView(
                empty.sample.__class__(**{**empty.sample.__dict__, "stack": ()}),
                None,
                None,
                "-",
                0,
                0,
                0,
                0,
                0,
                None,
                False,
            )
        )
        is None
    )


def test_a_lock_no_live_thread_holds_ends_at_the_lock_and_says_the_holder_may_have_died() -> None:
    deep = Deep(
        FUTEX,
        (thread(8, "idle", at(90, "idle"), kernel=SLEEP),),
        code=(
            code(20, "with cache_lock:", enters=("cache_lock",)),
            code(90, "time.sleep(5)", function="idle", calls=("time.sleep",)),
        ),
    )
    followed = follow(view((at(20),), deep))
    assert followed is not None and followed.end == "lock" and len(followed.hops) == 1
    assert "no live thread of rank 1 holds" in followed.hops[0].what


def test_a_lock_taken_again_by_its_own_holder_is_a_deadlock() -> None:
    deep = Deep(FUTEX, code=(code(21, "with stats_lock:", enters=("stats_lock",), holds=("stats_lock",)),))
    followed = follow(view((at(21),), deep))
    assert followed is not None and followed.end == "deadlock" and "already holds itself" in followed.hops[0].what


def test_two_threads_each_holding_the_lock_the_other_wants_are_a_deadlock() -> None:
    other = thread(9, "writer", at(60, "write"), kernel=FUTEX)
    deep = Deep(
        FUTEX,
        (other,),
        code=(
            code(20, "with b_lock:", enters=("b_lock",), holds=("a_lock",)),
            code(60, "with a_lock:", function="write", enters=("a_lock",), holds=("b_lock",)),
        ),
    )
    followed = follow(view((at(20),), deep))
    assert followed is not None and followed.end == "deadlock"
    assert [h.who for h in followed.hops] == ["rank 1", "rank 1's thread writer", "rank 1's thread MainThread"]


def test_must_not_a_lock_of_another_object_under_the_same_name_is_not_its_holder() -> None:
    """Both sides' locals show the object: by address, the thread in `with lock:` holds another lock."""
    mine = ((JOB, 20, (("lock", "<_thread.lock at 0x7f00000001>"),)),)
    theirs = ((JOB, 70, (("lock", "<_thread.lock at 0x7f00000002>"),)),)
    other = thread(9, "worker", at(70, "work"), kernel=SLEEP, locals_=theirs)
    deep = Deep(
        FUTEX,
        (other,),
        code=(
            code(20, "with lock:", enters=("lock",)),
            code(70, "time.sleep(1)", function="work", holds=("lock",)),
        ),
        main_locals=mine,
    )
    followed = follow(view((at(20),), deep))
    assert followed is not None and followed.end == "lock"  # nobody holds *this* lock
    same = thread(9, "worker", at(70, "work"), kernel=SLEEP, locals_=((JOB, 70, (("lock", mine[0][2][0][1]),)),))
    held = follow(view((at(20),), Deep(FUTEX, (same,), code=deep.code, main_locals=mine)))
    assert held is not None and held.end == "sleeping" and "held by thread worker" in held.hops[0].what


def test_an_event_is_followed_to_the_thread_that_sets_it_and_a_queue_nobody_fills_ends_there() -> None:
    wait = (Frame("Condition.wait", THREADING, 327), Frame("Event.wait", THREADING, 629), at(30))
    loader = thread(5, "loader", at(80, "loader"), kernel=SLEEP)
    deep = Deep(
        FUTEX,
        (loader,),
        code=(
            code(30, "loaded.wait()", calls=("loaded.wait",), fillers=(("loaded", ("loader",)),)),
            code(80, "time.sleep(3600)", function="loader", calls=("time.sleep",)),
        ),
    )
    followed = follow(view(wait, deep))
    assert followed is not None and followed.end == "sleeping" and "thread loader sets it" in followed.hops[0].what
    get = (Frame("Condition.wait", THREADING, 327), Frame("Queue.get", "/usr/lib/python3.11/queue.py", 171), at(31))
    nobody = Deep(
        FUTEX, code=(code(31, "t = batches.get()", calls=("batches.get",), fillers=(("batches", ("load",)),)),)
    )
    followed = follow(view(get, nobody))
    assert (
        followed is not None
        and followed.end == "nobody"
        and "no live thread of rank 1 runs load()" in followed.hops[0].what
    )


def loader_stack(worker_id: int | None) -> tuple[tuple[Frame, ...], tuple]:
    stack = (
        Frame("_MultiProcessingDataLoaderIter._try_get_data", LOADER, 1291),
        Frame("_MultiProcessingDataLoaderIter._get_data", LOADER, 1464),
        Frame("_MultiProcessingDataLoaderIter._next_data", LOADER, 1505),
        at(33),
    )
    found = () if worker_id is None else ((LOADER, 1505, (("worker_id", str(worker_id)),)),)
    return stack, found


def worker(pid: int, index: int, busy: bool) -> ChildSample:
    frames = (
        (Frame("Shards.__getitem__", JOB, 41),)
        if busy
        else (Frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),)
    )
    frames += (Frame("_worker_loop", WORKER, 334 if not busy else 374), Frame("__init__", LOADER, 1176))
    main = ThreadSample(
        pid,
        "MainThread",
        frames,
        KernelWait("openat", "wait_for_partner", target="/data/shard-7") if busy else KernelWait("poll"),
        ((LOADER, 1176, (("i", str(index)),)),),
    )
    return ChildSample(pid, 4001, "python train.py", "sleeping", threads=(main,))


def test_a_dataloader_wait_follows_the_worker_its_locals_name_into_its_read() -> None:
    stack, found = loader_stack(worker_id=1)
    deep = Deep(
        KernelWait("poll"),
        children=(worker(5001, 0, busy=False), worker(5002, 1, busy=True)),
        code=(code(41, 'with open(path, "rb") as f:', function="Shards.__getitem__", calls=("open",)),),
        main_locals=found,
    )
    followed = follow(view(stack, deep))
    assert followed is not None and followed.end == "reading"
    assert "its DataLoader worker (pid 5002)" in followed.hops[0].what
    assert "opens the FIFO /data/shard-7" in followed.hops[1].what and followed.hops[1].site == f"{JOB}:41"


def test_must_not_a_dataloader_whose_workers_are_all_idle_blames_no_worker() -> None:
    stack, _ = loader_stack(worker_id=None)
    deep = Deep(KernelWait("poll"), children=(worker(5001, 0, busy=False), worker(5002, 1, busy=False)))
    followed = follow(view(stack, deep))
    assert followed is not None and followed.end == "unknown" and len(followed.hops) == 1
    assert "worker(s) are idle" in followed.hops[0].what


def test_a_stopped_or_dead_worker_ends_the_chain_there() -> None:
    stack, found = loader_stack(worker_id=0)
    stopped = ChildSample(5001, 4001, "python train.py", "stopped")
    followed = follow(view(stack, Deep(KernelWait("poll"), children=(stopped,), main_locals=found)))
    assert followed is not None and followed.end == "child" and "is stopped" in followed.hops[1].what
    dead = ChildSample(5001, 4001, "python train.py", "zombie", exit_code=-9)
    followed = follow(view(stack, Deep(KernelWait("poll"), children=(dead,), main_locals=found)))
    assert followed is not None and followed.end == "exited" and "killed by signal 9" in followed.hops[1].what


def test_a_subprocess_is_followed_to_its_child_by_the_pid_wait4_names() -> None:
    subprocess = "/usr/lib/python3.11/subprocess.py"
    stack = (Frame("Popen._try_wait", subprocess, 2004), Frame("Popen.wait", subprocess, 1264), at(50))
    other = ChildSample(6000, 4001, "python helper.py", "sleeping", kernel=SLEEP)
    tool = ChildSample(6001, 4001, "sleep 3600", "sleeping", kernel=SLEEP)
    deep = Deep(KernelWait("wait4", "do_wait", child=6001), children=(other, tool))
    followed = follow(view(stack, deep))
    assert followed is not None and followed.end == "child" and "child pid 6001 (`sleep 3600`)" in followed.hops[0].what


def test_kernel_ends_a_socket_a_fifo_a_sleep_and_a_computing_thread() -> None:
    sock = KernelWait("recvfrom", "wait_woken", fd=10, target="socket:[77]", peer="10.0.0.5:8080")
    followed = follow(view((at(60),), Deep(sock)))
    assert (
        followed is not None
        and followed.end == "socket"
        and "TCP socket (fd 10) to 10.0.0.5:8080" in followed.hops[0].what
    )
    loop = Deep(SLEEP, code=(code(61, "time.sleep(0.5)", calls=("time.sleep",), loop="while not ready():"),))
    followed = follow(view((at(61),), loop))
    assert (
        followed is not None
        and followed.end == "sleeping"
        and "poll loop (`while not ready():`)" in followed.hops[0].what
    )
    followed = follow(view((at(62),), Deep(KernelWait(None, running=True))))
    assert followed is not None and followed.end == "computing"
    busy = follow(view((at(63),), None, cpu=100.0))  # no closer look: its main thread's CPU says it runs
    assert busy is not None and busy.end == "computing"
    # a loaded node gives a spinning thread a small share: runnable at the look and running some of the interval
    shared = follow(view((at(64),), None, cpu=12.0, status="running"))
    assert shared is not None and shared.end == "computing"


def test_must_not_a_wait_nothing_names_is_unknown_not_guessed() -> None:
    followed = follow(view((at(70),), Deep(KernelWait("futex", "futex_do_wait"))))
    assert followed is not None and followed.end == "unknown" and "could not be read" in followed.hops[0].what
    bare = follow(view((at(71),), None, cpu=0.0))
    assert bare is not None and bare.end == "unknown"
    # a little CPU alone (a thread woken now and then) or runnable at the look without CPU is not computing
    woken = follow(view((at(72),), None, cpu=12.0))
    assert woken is not None and woken.end == "unknown"
    instant = follow(view((at(73),), None, cpu=1.0, status="running"))
    assert instant is not None and instant.end == "unknown"
