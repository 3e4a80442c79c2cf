"""A rank's torch.distributed call with its arguments, as py-spy's ``--locals`` shows them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FrameLocals:
    """One frame of a ``py-spy dump --locals`` of a main thread, innermost first: each local's name and repr."""

    function: str
    filename: str
    line: int
    values: tuple[tuple[str, str], ...]  # (name, repr), the arguments first as py-spy lists them

    def get(self, name: str) -> str | None:
        return next((r for n, r in self.values if n == name), None)


SENDS, RECVS = frozenset({"send", "isend"}), frozenset({"recv", "irecv"})  # the point-to-point calls, by side


@dataclass(frozen=True)
class P2P:
    """One point-to-point op: ``send`` to ``peer`` or ``recv`` from it (global ranks; None: from any source), with its
    tag where known (None: not known; a send matches a receive only with the same tag)."""

    op: str  # send or recv
    peer: int | None
    tag: int | None = None

    def matches(self, other: P2P) -> bool:
        """Whether ``other`` (a peer's op towards this one's rank) has the tag this one needs, as far as known."""
        return self.tag is None or other.tag is None or self.tag == other.tag


@dataclass(frozen=True)
class CallArgs:
    """The arguments of the torch.distributed call a rank's main thread stands in.

    ``src``/``dst`` are global ranks, ``group_src``/``group_dst`` ranks in ``group``. ``group``: ``default``
    (the world), ``other`` (a sub-group: which one cannot be told from outside the process, as its address
    differs per process) or None (not known). ``p2p``: the point-to-point ops it waits on (one for send/recv,
    several for a batch); None where they could not be read. ``pending``: a frame that calls it holds a c10d Work
    handle (``req = dist.isend(...)`` before ``dist.recv(...)``): ops posted earlier may still be in flight, to peers
    the stack does not name."""

    op: str
    src: int | None = None
    dst: int | None = None
    group_src: int | None = None
    group_dst: int | None = None
    group: str | None = None
    tag: int | None = None
    p2p: tuple[P2P, ...] | None = None
    pending: bool = False
    world_size: int | None = None  # init_process_group: the world it waits to fill
    ranks: tuple[int, ...] | None = None  # new_group: the global ranks of the group it creates
    group_name: str | None = None  # the process group a start-up or group creation makes ("0": the default group)

    def root(self, in_group: bool = False) -> str | None:
        """``src=1``, ``dst=0``, ``group_dst=1``: the root; None: the op has none. On the default group a rank in
        the group is the global one (``group_dst=1`` reads ``dst=1``). ``in_group``: only as a rank of the group
        (``group_src``/``group_dst``, which torch computes from ``src``/``dst``)."""
        if self.op in SENDS | RECVS:
            return None
        for side in ("src", "dst"):
            mine, in_it = getattr(self, side), getattr(self, f"group_{side}")
            if in_group:
                if in_it is not None:
                    return f"group_{side}={in_it}"
            elif mine is not None or (in_it is not None and self.group == "default"):
                return f"{side}={mine if mine is not None else in_it}"
            elif in_it is not None:
                return f"group_{side}={in_it}"
        return None

    def text(self) -> str:
        """``recv from rank 1``, ``reduce dst=1``, ``all_reduce on a sub-group``: the call in words."""
        if self.op == "wait":
            return "work.wait() on a handle"
        if self.ranks is not None:
            return f"{self.op} of ranks {list(self.ranks)}"
        if self.world_size is not None:
            return f"{self.op} of a world of {self.world_size}"
        if self.p2p:
            body = ", ".join(
                f"{p.op} {'to' if p.op == 'send' else 'from'} {'any rank' if p.peer is None else f'rank {p.peer}'}"
                for p in self.p2p
            )
        elif self.op in RECVS and self.group_src is not None:
            body = f"{self.op} from group rank {self.group_src}"
        elif self.op in SENDS and self.group_dst is not None:
            body = f"{self.op} to group rank {self.group_dst}"
        else:
            root = self.root()
            body = self.op + (f" {root}" if root else "")
        return body + (" on a sub-group" if self.group == "other" else "")

    def to_json(self) -> dict[str, object]:
        return {
            "op": self.op,
            "src": self.src,
            "dst": self.dst,
            "group_src": self.group_src,
            "group_dst": self.group_dst,
            "group": self.group,
            "tag": self.tag,
            "p2p": None if self.p2p is None else [{"op": p.op, "peer": p.peer, "tag": p.tag} for p in self.p2p],
            "pending": self.pending,
            **({"world_size": self.world_size} if self.world_size is not None else {}),
            **({"ranks": list(self.ranks)} if self.ranks is not None else {}),
            **({"group_name": self.group_name} if self.group_name is not None else {}),
        }


def args_from_json(d: object) -> CallArgs | None:
    """``CallArgs.to_json`` read back (a node agent's line), or None when it is not such a dict."""
    if not isinstance(d, dict) or not isinstance(d.get("op"), str):
        return None

    def number(key: str) -> int | None:
        value: Any = d.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    ops = d.get("p2p")
    p2p = (
        tuple(
            P2P(
                str(p.get("op")),
                p.get("peer") if isinstance(p.get("peer"), int) else None,
                p.get("tag") if isinstance(p.get("tag"), int) else None,
            )
            for p in ops
        )
        if isinstance(ops, list) and all(isinstance(p, dict) for p in ops)
        else None
    )
    group = d.get("group") if d.get("group") in ("default", "other") else None
    members = d.get("ranks")
    name = d.get("group_name")
    return CallArgs(
        str(d["op"]),
        number("src"),
        number("dst"),
        number("group_src"),
        number("group_dst"),
        group=group if isinstance(group, str) else None,
        tag=number("tag"),
        p2p=p2p,
        pending=d.get("pending") is True,
        world_size=number("world_size"),
        ranks=tuple(r for r in members if isinstance(r, int)) if isinstance(members, list) else None,
        group_name=name if isinstance(name, str) else None,
    )


@dataclass(frozen=True)
class PostedOp:
    """One point-to-point op a rank posted, as ``ncclcheck run``'s hook recorded it (``control_hook_p2p``)."""

    op: str  # send or recv
    call: str  # send, recv, isend, irecv (batch_isend_irecv posts isend and irecv)
    peer: int | None  # a global rank; None: a recv from any source
    tag: int
    group: str  # the process group's name ("0": the default group)
    site: str | None  # file:line of the user's code that posted it
    state: str  # pending, completed, failed, not-member, unknown
    seq: int  # the order the rank posted its ops in

    def as_p2p(self) -> P2P:
        return P2P(self.op, self.peer, self.tag)


@dataclass(frozen=True)
class Skipped:
    """A collective c10d returned from at once: the rank is not a member of the group it passed (a warning in its
    log). The call, the user's line, and that group's global ranks where read."""

    call: str
    site: str | None
    ranks: tuple[int, ...] | None


@dataclass(frozen=True)
class PostedOps:
    """What a rank posted: its last ops (oldest first) and how many it posted so far per side and peer."""

    ops: tuple[PostedOp, ...]
    posted: tuple[tuple[str, int], ...] = ()  # ("send:1", 3), ("recv:any", 1)
    skipped: tuple[Skipped, ...] = ()  # calls on a group the rank is not a member of

    def pending(self) -> tuple[PostedOp, ...]:
        return tuple(o for o in self.ops if o.state == "pending")

    def count(self, op: str, peer: int | None) -> int:
        key = f"{op}:{'any' if peer is None else peer}"
        return next((n for k, n in self.posted if k == key), 0)

    def to_json(self) -> dict[str, object]:
        return {
            "ops": [
                {
                    "op": o.op,
                    "call": o.call,
                    "peer": o.peer,
                    "tag": o.tag,
                    "group": o.group,
                    "site": o.site,
                    "state": o.state,
                    "seq": o.seq,
                }
                for o in self.ops
            ],
            "posted": dict(self.posted),
            "skipped": [
                {"call": x.call, "site": x.site, "ranks": None if x.ranks is None else list(x.ranks)}
                for x in self.skipped
            ],
        }


def posted_from_json(d: object) -> PostedOps | None:
    """The hook's answer (or ``PostedOps.to_json``) read back; None when it is not one."""
    if not isinstance(d, dict) or not isinstance(d.get("ops"), list):
        return None
    ops = []
    for o in d["ops"]:
        if not isinstance(o, dict) or o.get("op") not in ("send", "recv"):
            continue
        peer, tag, seq = o.get("peer"), o.get("tag"), o.get("seq")
        ops.append(
            PostedOp(
                str(o["op"]),
                str(o.get("call") or o["op"]),
                peer if isinstance(peer, int) and not isinstance(peer, bool) else None,
                tag if isinstance(tag, int) and not isinstance(tag, bool) else 0,
                str(o.get("group") or "?"),
                o.get("site") if isinstance(o.get("site"), str) else None,
                str(o.get("state") or "unknown"),
                seq if isinstance(seq, int) else 0,
            )
        )
    posted = d.get("posted")
    counts = tuple((str(k), v) for k, v in posted.items() if isinstance(v, int)) if isinstance(posted, dict) else ()
    skipped = tuple(
        Skipped(
            str(x["call"]),
            x.get("site") if isinstance(x.get("site"), str) else None,
            tuple(r for r in x["ranks"] if isinstance(r, int)) if isinstance(x.get("ranks"), list) else None,
        )
        for x in d.get("skipped") or []
        if isinstance(x, dict) and isinstance(x.get("call"), str)
    )
    return PostedOps(tuple(sorted(ops, key=lambda o: o.seq)), counts, skipped)
