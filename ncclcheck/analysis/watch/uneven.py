"""Uneven inputs under DDP: some ranks still in the training loop, in autograd's backward (where DDP's gradient
all-reduce runs), while others have left it: they wait in a collective after the loop (a final barrier, an
evaluation's all_reduce) or have exited. The ranks in backward wait for gradients the others will never send."""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.analysis.stacks import CUDA_SYNC, P2P
from ncclcheck.model.findings import Finding
from ncclcheck.model.ids import watch as watch_ids
from ncclcheck.model.ranks import span
from ncclcheck.model.stacks import short
from ncclcheck.model.watch import RankView

UNEVEN_FIX = (
    "give every rank the same number of batches: DistributedSampler(dataset, drop_last=True) (or pad the last "
    "batch), or let ranks that run out shadow the others' all-reduces with DDP's join(): "
    "`with model.join(): for batch in loader: ...` (torch.distributed.algorithms.Join for several models or "
    "optimizers)"
)
NOT_COLLECTIVES = (None, "backward", "wait", CUDA_SYNC)  # no collective, or one whose peers are not in the stack


def uneven_inputs(waiters: Sequence[RankView], exited: Sequence[RankView]) -> Finding | None:
    """The ``uneven-inputs`` finding, or None. ``exited``: ranks gone with exit code 0 or unknown (not failures)."""
    backward = [v for v in waiters if v.collective == "backward"]
    # a rank in send/recv is no rank that left the loop: a pipeline stage waits there while another runs backward
    after = [v for v in waiters if v.collective not in NOT_COLLECTIVES and v.collective not in P2P]
    if not backward or not (after or exited):
        return None
    still = span([v.rank for v in backward])
    left = sorted([*after, *exited], key=lambda v: v.rank)
    parts = [f"rank {v.rank} waits in {v.collective} at {short(v.call_site)}" for v in after]
    parts += [f"rank {v.rank} has exited" for v in exited]
    at = sorted({short(v.call_site) for v in backward if v.call_site})
    message = (
        f"rank {still} {'wait' if len(backward) > 1 else 'waits'} in backward{f' at {at[0]}' if len(at) == 1 else ''} "
        f"(under DDP, its gradient all-reduce); {'; '.join(parts)} — uneven inputs: rank "
        f"{span([v.rank for v in left])} left the training loop (ran out of batches) while rank {still} "
        f"{'are' if len(backward) > 1 else 'is'} still training, and DDP's all-reduce waits for the ranks that left"
    )
    if after:  # a stack does not say whether a line is after the loop or inside it
        message += (
            " (if that collective is inside the training loop instead, the stacks cannot tell this from a"
            " rank-dependent no_sync/gradient-accumulation step or a long backward: compare the lines)"
        )
    roles = tuple(
        sorted([(v.rank, "in the training loop") for v in backward] + [(v.rank, "left the loop") for v in left])
    )
    ranks = tuple(sorted(v.rank for v in [*backward, *left]))
    return Finding(watch_ids.UNEVEN_INPUTS, "error", message, UNEVEN_FIX, ranks=ranks, culprits=(), roles=roles)
