"""The zoo's cases and their truth: the real hangs of tests/integration/run/test_zoo.py, replayed by
tests/unit/analysis/watch/test_zoo_replay.py and measured by benchmarks/bench_zoo.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Truth:
    """A case: its ranks, the finding it must give (run's verdict for a crash), the culprits, the words of its chain."""

    nproc: int
    kind: str
    culprits: tuple[int, ...]
    words: tuple[str, ...] = ()
    crash: bool = False


ZOO = {
    # start-up and group creation: the ranks not there are the culprits
    "late-init": Truth(2, "startup", (1,), ("has not reached init_process_group", "sleeps", "poll loop")),
    "world-size": Truth(2, "startup", (2,), ("was never started", "a world of 3")),
    "exit-before-init": Truth(2, "startup", (1,), ("rank 0 waits in init_process_group", "rank 1")),
    "group-subset": Truth(3, "group-creation", (2,), ("never called new_group", "all_reduce")),
    "group-order": Truth(3, "group-order", (1,), ("different order", "rank 1 with ranks [0, 2]")),
    # point-to-point: the code, never the network
    "p2p-cycle": Truth(2, "p2p-deadlock", (0, 1), ("deadlock in the code",)),
    "p2p-batch-cycle": Truth(2, "p2p-deadlock", (0, 1), ("deadlock in the code",)),
    "wrong-peer": Truth(3, "p2p-wrong-peer", (1,), ("names rank 0 where rank 2 expects it",)),
    "wrong-tag": Truth(2, "p2p-tag-mismatch", (0, 1), ("tags differ",)),
    "never-waited": Truth(2, "p2p-unmatched", (1,), ("never waited on", "one receive too many")),
    # collectives
    "if-rank0": Truth(3, "mismatch", (0,), ("rank 0 is the odd one out",)),
    "wrong-group": Truth(4, "subgroup-wait", (1,), ("process group of rank 2-3", "not a member")),
    "sub-mismatch": Truth(2, "mismatch", (), ("all_reduce", "broadcast", "mismatched collectives")),
    # inside a rank: threads and child processes
    "dl-stuck": Truth(2, "straggler", (1,), ("its DataLoader worker (pid", "opens the FIFO", "shard-")),
    "dl-stopped": Truth(2, "straggler", (1,), ("its DataLoader worker (pid", "is stopped")),
    "lock-held": Truth(2, "straggler", (1,), ("lock `stats_lock`, held by thread flusher", "sleeps")),
    "event": Truth(2, "straggler", (1,), ("`loaded`; thread loader sets it", "sleeps")),
    "queue-empty": Truth(2, "straggler", (1,), ("`batches`", "no other thread")),
    "thread-died": Truth(2, "straggler", (1,), ("lock `cache_lock`", "no live thread of rank 1 holds")),
    "subprocess": Truth(2, "straggler", (1,), ("its child pid", "`sleep 3600`", "clock_nanosleep")),
    "sleep": Truth(2, "straggler", (1,), ("`time.sleep(FOREVER)`", "sleeps")),
    "socket": Truth(2, "straggler", (1,), ("reads a TCP socket", "127.0.0.1:", "sent nothing")),
    "compute": Truth(2, "straggler", (1,), ("computes", "in spin")),
    "checkpoint": Truth(2, "straggler", (0,), ("torch.save", "opens the FIFO", "ckpt-")),
    # crashes: the rank that began the end, never the ones the launcher ended after it
    "exited-early": Truth(2, "rank-left-early", (1,), crash=True),
    "killed": Truth(2, "child-failed", (1,), ("SIGKILL",), crash=True),
    "crash": Truth(2, "python-exception", (1,), ("a batch with no labels",), crash=True),
    "dl-dead": Truth(2, "python-exception|child-failed", (1,), crash=True),  # whichever error the race lets rank 1 see
}
