"""NCCL's asynchronous collectives in watch's analysis: a rank whose host waits at a CUDA synchronisation waits on a
collective not completed. It is never "outside any collective" or a straggler for that alone; every rank there and
none moving is a hang inside NCCL with nobody named and the transport not blamed alone; a rank busy in its own code
while the others wait there is the straggler. Stacks are the shapes py-spy shows of NCCL ranks (with and without
``--native``): there is no GPU on this machine."""

from __future__ import annotations

from watch_states import job, sample, stack, states

from ncclcheck.analysis.watch.track import doing
from ncclcheck.model.stacks import Frame

TRAIN = "/job/train.py"
SYNC = "/env/lib/python3.11/site-packages/torch/cuda/__init__.py"


def synced(line: int = 91, native: bool = False) -> tuple[Frame, ...]:
    """A rank at ``loss.item()`` (native frames show the C call) or at ``torch.cuda.synchronize()``."""
    if native:
        inner = (
            Frame("cudaStreamSynchronize", "libcudart.so.12", 0, native=True),
            Frame("at::native::_local_scalar_dense_cuda", "libtorch_cuda.so", 0, native=True),
        )
    else:
        inner = (Frame("synchronize", SYNC, 801),)
    return (*inner, Frame("step", TRAIN, line), Frame("<module>", TRAIN, 120))


def busy(line: int) -> tuple[Frame, ...]:
    return (Frame("augment", TRAIN, line), Frame("step", TRAIN, 70), Frame("<module>", TRAIN, 120))


def test_a_cuda_synchronisation_is_where_a_rank_waits_on_its_collectives() -> None:
    for frames in (synced(), synced(native=True)):
        op, site, label = doing(sample(0, frames, status="running", cpu=5.0))
        assert op == "cuda-sync" and label == "cuda-sync" and site and site.startswith(f"{TRAIN}:91")
    assert doing(sample(0, busy(40)))[0] is None  # must not: a rank in its own code is in no collective


def test_every_rank_at_a_cuda_sync_and_still_is_a_hang_inside_nccl_naming_nobody_and_not_the_network_alone() -> None:
    j = job(4)
    rounds = [
        {r: sample(r, synced(91 + (r == 3), native=r % 2 == 1), "running", cpu=5.0 * i) for r in range(4)}
        for i in range(4)
    ]
    state = states(j, *rounds)
    stalled = [f for f in state.findings if f.id == "stalled"]
    assert len(stalled) == 1 and stalled[0].severity == "error" and not stalled[0].culprits, state.findings
    words = stalled[0].message
    assert "CUDA synchronisation" in words and "did not launch" in words and "the stacks cannot tell" in words
    assert "Flight Recorder" in stalled[0].fix and "RAS" in stalled[0].fix
    assert all(f.id not in ("straggler", "mismatch", "no-progress") for f in state.findings), state.findings


def test_a_rank_busy_in_its_own_code_while_the_others_wait_at_a_cuda_sync_is_the_straggler() -> None:
    j = job(4)
    rounds = [
        {
            r: sample(r, synced(), "running", cpu=5.0 * i)
            if r != 2
            else sample(r, busy(40 + i), "running", cpu=5.0 * i)
            for r in range(4)
        }
        for i in range(4)
    ]
    state = states(j, *rounds)
    straggler = [f for f in state.findings if f.id == "straggler"]
    assert straggler and straggler[0].culprits == (2,), state.findings
    assert "CUDA" not in straggler[0].message.split("rank 2")[1].split(";")[0]  # the waiters are not the culprit


def test_must_not_a_cuda_sync_beside_a_collective_is_a_mismatch_that_blames_the_minority() -> None:
    j = job(4)
    rounds = [{r: sample(r, synced() if r else stack("all_reduce"), "running") for r in range(4)} for _ in range(4)]
    state = states(j, *rounds)
    assert all(not f.culprits for f in state.findings), state.findings
    mismatch = [f for f in state.findings if f.id == "mismatch"]
    assert not mismatch or "ranks at a CUDA synchronisation beside ranks in a collective" in mismatch[0].message
    assert all("mismatched collectives" not in f.message for f in state.findings)  # which one it waits on: unknown


def test_must_not_ranks_passing_through_a_sync_step_after_step_are_stalled() -> None:
    j = job(2)
    lines = [91, 60, 91, 60, 91]  # each look finds them at another line: the job runs
    rounds = [
        {r: sample(r, synced(line) if line == 91 else busy(line), "running", cpu=5.0 * i) for r in range(2)}
        for i, line in enumerate(lines)
    ]
    state = states(j, *rounds)
    assert all(f.severity != "error" for f in state.findings), state.findings
