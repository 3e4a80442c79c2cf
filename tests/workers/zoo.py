"""A zoo of real hangs on torchrun/gloo, one per $CASE, each written from scratch; and their must-not twins.

Every rank prints "ready <rank>" just before the place where the case hangs (or, for a crash, just before it
crashes). $ZOO_DIR is a scratch folder of the test's. The truth of each case (the culprit and the chain) lives in
tests/zoo_cases.py beside the case's name. $CASE=twins runs the healthy twin of every case, one after the other
(each a second or two, shorter than the tests' --stall), prints "twin <name> <rank>" as each one starts and "done
<rank>" at the end, then exits 0.
"""

import datetime
import os
import queue
import signal
import socket
import subprocess
import threading
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

CASE = os.environ["CASE"]
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DIR = os.environ.get("ZOO_DIR", "/tmp")
FOREVER = 3600


def ready() -> None:
    print(f"ready {RANK}", flush=True)


def init(**kwargs) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=FOREVER), **kwargs)


def wait_for_file(path: str, deadline_s: float = FOREVER) -> None:
    end = time.monotonic() + deadline_s
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.5)


# start-up and group creation


def late_init() -> None:
    ready()
    if RANK == 1:
        wait_for_file(os.path.join(DIR, "go"))  # nobody ever creates it
    init()


def world_size() -> None:
    ready()
    dist.init_process_group("gloo", world_size=WORLD + 1, rank=RANK)  # one rank more than torchrun started


def exit_before_init() -> None:
    ready()
    if RANK == 1:
        os._exit(0)
    init()


def group_subset() -> None:
    os.environ["TORCH_DIST_INIT_BARRIER"] = "1"
    init()
    ready()
    if RANK != 2:  # every rank must call new_group, members or not
        dist.new_group([0, 1])
    dist.all_reduce(torch.ones(4))


def group_order() -> None:
    os.environ["TORCH_DIST_INIT_BARRIER"] = "1"
    init()
    ready()
    if RANK == 1:
        dist.new_group([0, 2])
        dist.new_group([0, 1])
    else:
        dist.new_group([0, 1])
        dist.new_group([0, 2])


# point-to-point


def p2p_cycle() -> None:
    init()
    t = torch.ones(4)
    ready()
    peer = 1 - RANK
    dist.recv(t, peer)  # both receive first
    dist.send(t, peer)


def exchange(t: torch.Tensor, peer: int) -> None:
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, t, peer)])  # only the receive is posted
    for req in reqs:
        req.wait()
    dist.send(t, peer)


def p2p_batch_cycle() -> None:
    init()
    ready()
    exchange(torch.ones(4), 1 - RANK)


def stage(t: torch.Tensor) -> None:
    """A three-stage pipeline: 0 sends to 1, 1 passes on to 2, 2 receives."""
    if RANK == 0:
        dist.send(t, 1)
    elif RANK == 1:
        dist.recv(t, 0)
        nxt = 0  # the bug: the next stage is 2
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, nxt)])
        for req in reqs:
            req.wait()
    else:
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, t, 1)])
        for req in reqs:
            req.wait()


def wrong_peer() -> None:
    init()
    ready()
    stage(torch.ones(4))
    dist.barrier()


def wrong_tag() -> None:
    init()
    t = torch.ones(4)
    ready()
    if RANK == 0:
        dist.send(t, 1, tag=1)
    else:
        dist.recv(t, 0, tag=2)


def never_waited() -> None:
    init()
    t = torch.ones(4)
    ready()
    if RANK == 0:
        dist.send(t, 1)
    else:
        early = dist.irecv(t, 0)  # never waited: it takes rank 0's one message
        time.sleep(0.5)
        dist.recv(t, 0)
        del early
    dist.barrier()


# collectives


def if_rank0() -> None:
    init()
    t = torch.ones(4)
    ready()
    if RANK == 0:
        dist.all_reduce(t)  # only rank 0 joins it
    dist.barrier()


def wrong_group() -> None:
    init()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    ready()
    mine = groups[RANK // 2] if RANK != 1 else groups[1]  # rank 1 picks the other pair's group
    dist.all_reduce(torch.ones(4), group=mine)  # not a member: rank 1 goes straight on
    dist.barrier()


def sub_mismatch() -> None:
    init()
    group = dist.new_group([0, 1])
    t = torch.ones(4)
    ready()
    if RANK == 0:
        dist.all_reduce(t, group=group)
    else:
        dist.broadcast(t, 0, group=group)


# data loaders


class Shards(Dataset):
    def __init__(self, stuck: int | None = None, killed: int | None = None, stopped: int | None = None) -> None:
        self.stuck, self.killed, self.stopped = stuck, killed, stopped

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> torch.Tensor:
        if RANK == 1 and i == self.stuck:
            path = os.path.join(DIR, f"shard-{os.getpid()}")
            os.mkfifo(path)
            with open(path, "rb") as f:  # a FIFO no process writes to
                return torch.tensor(list(f.read(4)), dtype=torch.float)
        if RANK == 1 and i == self.killed:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
        if RANK == 1 and i == self.stopped:
            os.kill(os.getpid(), signal.SIGSTOP)  # as a debugger or a job-control stop would
        return torch.ones(4) * i


def train(loader: DataLoader) -> None:
    for batch in loader:
        dist.all_reduce(batch)


def dl_stuck() -> None:
    init()
    ready()
    train(DataLoader(Shards(stuck=5), batch_size=2, num_workers=2))


def dl_stopped() -> None:
    init()
    ready()
    train(DataLoader(Shards(stopped=5), batch_size=2, num_workers=2))


def dl_dead() -> None:
    init()
    ready()
    train(DataLoader(Shards(killed=5), batch_size=2, num_workers=2))


# threads


stats_lock = threading.Lock()


def flusher(hold_s: float) -> None:
    with stats_lock:
        time.sleep(hold_s)


def lock_held() -> None:
    init()
    threading.Thread(target=flusher, args=(FOREVER,), name="flusher", daemon=True).start()
    time.sleep(0.2)
    ready()
    if RANK == 1:
        with stats_lock:
            pass
    dist.all_reduce(torch.ones(4))


loaded = threading.Event()


def loader_thread(delay_s: float) -> None:
    time.sleep(delay_s)
    loaded.set()


def event_unset() -> None:
    init()
    threading.Thread(target=loader_thread, args=(FOREVER,), name="loader", daemon=True).start()
    ready()
    if RANK == 1:
        loaded.wait()
    dist.all_reduce(torch.ones(4))


batches: queue.Queue = queue.Queue()


def queue_empty() -> None:
    init()
    ready()
    t = torch.ones(4)
    if RANK == 1:
        t = batches.get()  # no thread puts to it
    dist.all_reduce(t)


cache_lock = threading.Lock()


def refresh_cache(fail: bool) -> None:
    cache_lock.acquire()
    if fail:
        raise ValueError("corrupt cache entry")  # dies holding cache_lock
    cache_lock.release()


def thread_died() -> None:
    init()
    worker = threading.Thread(target=refresh_cache, args=(RANK == 1,), name="cache", daemon=True)
    worker.start()
    worker.join()
    ready()
    with cache_lock:
        pass
    dist.all_reduce(torch.ones(4))


# processes, sleeps, sockets, compute


def run_tool() -> None:
    init()
    ready()
    if RANK == 1:
        subprocess.run(["sleep", str(FOREVER)], check=False)  # a tool that never returns
    dist.all_reduce(torch.ones(4))


def asleep() -> None:
    init()
    ready()
    if RANK == 1:
        time.sleep(FOREVER)
    dist.all_reduce(torch.ones(4))


def fetch(server: socket.socket) -> bytes:
    client = socket.create_connection(server.getsockname())
    return client.recv(1024)  # the service accepts and never answers


def socket_silent() -> None:
    init()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    ready()
    if RANK == 1:
        fetch(server)
    dist.all_reduce(torch.ones(4))


def spin() -> float:
    x = 1.0
    while True:
        x = x * 1.000001
        x = x / 1.0000001


def compute() -> None:
    init()
    ready()
    if RANK == 1:
        spin()
    dist.all_reduce(torch.ones(4))


def exited_early() -> None:
    init()
    ready()
    if RANK == 1:
        os._exit(0)  # leaves the loop early
    dist.all_reduce(torch.ones(4))


def killed() -> None:
    init()
    ready()
    if RANK == 1:
        time.sleep(1)
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(4))
    time.sleep(FOREVER)


def crash() -> None:
    init()
    ready()
    if RANK == 1:
        time.sleep(1)
        raise ValueError("a batch with no labels")
    dist.all_reduce(torch.ones(4))
    time.sleep(FOREVER)


def checkpoint() -> None:
    init()
    ready()
    if RANK == 0:
        path = os.path.join(DIR, f"ckpt-{os.getpid()}.pt")
        os.mkfifo(path)  # a path that blocks the writer (a hung filesystem behaves alike)
        torch.save({"w": torch.ones(4)}, path)
    dist.barrier()


CASES = {
    "late-init": late_init,
    "world-size": world_size,
    "exit-before-init": exit_before_init,
    "group-subset": group_subset,
    "group-order": group_order,
    "p2p-cycle": p2p_cycle,
    "p2p-batch-cycle": p2p_batch_cycle,
    "wrong-peer": wrong_peer,
    "wrong-tag": wrong_tag,
    "never-waited": never_waited,
    "if-rank0": if_rank0,
    "wrong-group": wrong_group,
    "sub-mismatch": sub_mismatch,
    "dl-stuck": dl_stuck,
    "dl-stopped": dl_stopped,
    "dl-dead": dl_dead,
    "lock-held": lock_held,
    "event": event_unset,
    "queue-empty": queue_empty,
    "thread-died": thread_died,
    "subprocess": run_tool,
    "sleep": asleep,
    "socket": socket_silent,
    "compute": compute,
    "exited-early": exited_early,
    "killed": killed,
    "crash": crash,
    "checkpoint": checkpoint,
}


# the twins: the same code without the bug, each done in a second or two


def twin(name: str) -> None:
    print(f"twin {name} {RANK}", flush=True)


def twins() -> None:
    twin("late-init")
    if RANK == 1:  # a slow start that does join
        wait_for_file(os.path.join(DIR, "never"), deadline_s=1.5)
    os.environ["TORCH_DIST_INIT_BARRIER"] = "1"
    init()
    t = torch.ones(4)
    twin("group-creation")
    pair = dist.new_group([0, 1])  # every rank, members or not, in the same order
    other = dist.new_group([0, 2]) if WORLD > 2 else pair
    if RANK in (0, 1):
        dist.all_reduce(t, group=pair)
    if RANK in (0, 2) and WORLD > 2:
        dist.all_reduce(t, group=other)
    twin("p2p")
    right, left = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    r = torch.zeros(4)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, right), dist.P2POp(dist.irecv, r, left)])
    for req in reqs:
        req.wait()
    if RANK % 2 == 0:
        dist.send(t, right, tag=3)
        dist.recv(r, left, tag=3)
    else:
        dist.recv(r, left, tag=3)
        dist.send(t, right, tag=3)
    twin("dataloader")
    for batch in DataLoader(Shards(), batch_size=2, num_workers=2):
        dist.all_reduce(batch)
    twin("threads")
    order_lock, warmed, inbox, table_lock = threading.Lock(), threading.Event(), queue.Queue(), threading.Lock()

    def flush() -> None:
        with order_lock:
            time.sleep(0.5)

    def warm() -> None:
        time.sleep(0.5)
        warmed.set()

    def refill() -> None:
        table_lock.acquire()
        try:
            inbox.put(torch.ones(4))
        finally:
            table_lock.release()

    threading.Thread(target=flush, name="flusher", daemon=True).start()
    time.sleep(0.1)
    with order_lock:  # waits for the flusher a moment
        pass
    threading.Thread(target=warm, name="loader", daemon=True).start()
    warmed.wait()
    filler = threading.Thread(target=refill, name="cache", daemon=True)
    filler.start()
    dist.all_reduce(inbox.get())
    filler.join()
    with table_lock:
        pass
    twin("processes")
    subprocess.run(["sleep", "0.5"], check=False)
    time.sleep(0.5)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    threading.Timer(0.5, conn.sendall, args=(b"pong",)).start()
    client.recv(1024)
    twin("compute")
    end = time.monotonic() + 1.0
    x = 1.0
    while time.monotonic() < end:
        x = x * 1.000001
    if RANK == 0:
        torch.save({"w": t}, os.path.join(DIR, f"ckpt-{RANK}.pt"))
    dist.barrier()
    print(f"done {RANK}", flush=True)
    dist.destroy_process_group()


if CASE == "twins":
    twins()
else:
    CASES[CASE]()
    print(f"passed {RANK}", flush=True)  # a case that did not hang: the test fails on this line
    time.sleep(FOREVER)
