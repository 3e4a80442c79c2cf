"""Collective arguments parsed from recorded ``py-spy dump --locals`` of real gloo ranks (see the fixtures' INDEX.md)."""

from __future__ import annotations

import json

import conftest
import pytest

from ncclcheck.analysis.watch.arguments import parse
from ncclcheck.collectors.pyspy import main_thread_locals
from ncclcheck.model.args import P2P, CallArgs, FrameLocals, args_from_json

FIXTURES = conftest.FIXTURES / "pyspy_locals"


def args_of(name: str) -> CallArgs | None:
    frames = main_thread_locals(json.loads((FIXTURES / f"{name}.json").read_text()))
    assert frames is not None
    return parse(frames)


def test_recv_names_its_source_and_the_default_group() -> None:
    a = args_of("p2p_deadlock-rank0")
    assert a == CallArgs("recv", src=1, group="default", tag=0, p2p=(P2P("recv", 1, 0),))
    assert a.text() == "recv from rank 1"
    assert args_of("p2p_deadlock-rank1") == CallArgs("recv", src=0, group="default", tag=0, p2p=(P2P("recv", 0, 0),))


@pytest.mark.parametrize(("rank", "root"), [(0, "dst=0"), (1, "dst=1")])
def test_reduce_gives_its_dst_though_group_was_rebound_to_the_default_groups_object(rank: int, root: str) -> None:
    a = args_of(f"reduce_dst-rank{rank}")
    assert a is not None and a.op == "reduce" and a.root() == root and a.group == "default" and a.p2p is None


def test_broadcast_src() -> None:
    roots = [a.root() if (a := args_of(f"broadcast_src-rank{r}")) else None for r in (0, 1)]
    assert roots == ["src=0", "src=1"]


def test_a_sub_group_passed_by_keyword_reads_other_and_no_group_reads_default() -> None:
    waiting = args_of("pairs-rank2")
    assert waiting is not None and (waiting.op, waiting.group) == ("all_reduce", "other")
    assert waiting.text() == "all_reduce on a sub-group"
    for rank in (0, 1, 3):
        a = args_of(f"pairs-rank{rank}")
        assert a is not None and (a.op, a.group) == ("barrier", "default")


def test_a_wait_on_a_handle_is_told_by_the_handle_but_backward_has_no_arguments() -> None:
    """After batch_isend_irecv or irecv returns, the main thread sleeps in work.wait(): only the user's frame, which
    holds the Work handle(s) (``reqs=[<...Work at 0x..>]``); the P2POp reprs name no peer."""
    for name in ("batch_deadlock-rank0", "irecv_deadlock-rank0"):
        assert args_of(name) == CallArgs("wait")
    assert args_of("uneven_ddp-rank0") is None


def test_a_group_passed_by_position_and_a_subgroup_rank_without_the_global_one() -> None:
    pg = "<torch._C._distributed_c10d.ProcessGroup at 0x7f00>"
    call = FrameLocals(
        "send", "/t/torch/distributed/distributed_c10d.py", 1, (("dst", "None"), ("group_dst", "1"), ("group", pg))
    )
    wrapper = FrameLocals(
        "wrapper", "/t/torch/distributed/c10d_logger.py", 83, (("args", f"(<Tensor at 0x1>, {pg})"), ("kwargs", "{}"))
    )
    a = parse((call, wrapper))
    assert a is not None and a.group == "other" and a.p2p is None  # rank 1 of a sub-group: its global rank unknown
    default = parse(
        (FrameLocals(call.function, call.filename, 1, (("dst", "None"), ("group_dst", "1"), ("group", "None"))),)
    )
    assert default is not None and default.p2p == (P2P("send", 1),)
    any_source = parse((FrameLocals("recv", call.filename, 1, (("src", "None"), ("group", "None"))),))
    assert any_source is not None and any_source.p2p == (P2P("recv", None),)
    assert any_source.text() == "recv from any rank"


def test_no_wrapper_and_a_rebound_group_is_not_known() -> None:
    pg = "<torch._C._distributed_c10d.ProcessGroup at 0x7f00>"
    a = parse((FrameLocals("all_reduce", "/t/torch/distributed/distributed_c10d.py", 1, (("group", pg),)),))
    assert a is not None and a.group is None


def test_arguments_travel_in_a_node_agents_line_and_back() -> None:
    for name in ("p2p_deadlock-rank0", "reduce_dst-rank1", "pairs-rank2"):
        a = args_of(name)
        assert a is not None and args_from_json(json.loads(json.dumps(a.to_json()))) == a
    assert args_from_json({"op": 3}) is None and args_from_json(None) is None


def test_gather_and_scatter_roots() -> None:
    assert [a.root() if (a := args_of(f"gather_dst-rank{r}")) else None for r in (0, 1)] == ["dst=0", "dst=1"]
    assert [a.root() if (a := args_of(f"scatter_src-rank{r}")) else None for r in (0, 1)] == ["src=0", "src=1"]


def test_a_recv_on_a_sub_group_by_group_src_has_no_global_peer() -> None:
    a = args_of("pair_recv-rank2")
    assert a is not None and (a.op, a.src, a.group_src, a.group, a.p2p) == ("recv", None, 1, "other", None)
    assert a.text() == "recv from group rank 1 on a sub-group"


def test_a_handle_held_by_the_callers_frame_is_an_op_in_flight_and_travels() -> None:
    """``req = dist.isend(x, right); dist.recv(y, left)``: the caller's frame holds the isend's Work; recv's own
    ``work`` local is not one the user posted earlier."""
    c10d = "/t/torch/distributed/distributed_c10d.py"
    work = "<torch._C._distributed_c10d.Work at 0x7f1>"
    call = FrameLocals("recv", c10d, 1, (("src", "2"), ("group", "None"), ("work", work)))
    user = FrameLocals("ring", "/job/ring.py", 9, (("send_req", work),))
    assert parse((call, user)) == CallArgs("recv", src=2, group="default", p2p=(P2P("recv", 2),), pending=True)
    assert parse((call,)) == CallArgs("recv", src=2, group="default", p2p=(P2P("recv", 2),))
    a = parse((call, user))
    assert a is not None and args_from_json(json.loads(json.dumps(a.to_json()))) == a


def test_a_group_cut_from_a_long_repr_is_not_known_not_the_default_group() -> None:
    """py-spy shortens a repr to about 120 characters: ``dist.all_gather(outs, t, pg)`` with 8 tensors in ``outs``
    shows ``args=([<Tensor ..>, <Tensor ..>, <Tensor ..>, <Tensor ..>, ...], ...)`` and the keyword form
    ``kwargs={...}`` (both as py-spy 0.4.3 printed them): the group may be in the part cut off."""
    c10d = "/t/torch/distributed/distributed_c10d.py"
    pg = "<torch._C._distributed_c10d.ProcessGroup at 0x7f134a886b70>"
    call = FrameLocals("all_gather", c10d, 1, (("group", pg),))
    tensors = ", ".join("<Tensor at 0x7f134b0b2080>" for _ in range(4))
    for args, kwargs in ((f"([{tensors}, ...], ...)", "{}"), ("()", "{...}")):
        wrapper = FrameLocals(
            "wrapper", "/t/torch/distributed/c10d_logger.py", 83, (("args", args), ("kwargs", kwargs))
        )
        a = parse((call, wrapper))
        assert a is not None and a.group is None, (args, kwargs)
    short = FrameLocals(
        "wrapper", "/t/torch/distributed/c10d_logger.py", 83, (("args", f"([{tensors}])"), ("kwargs", "{}"))
    )
    whole = parse((call, short))
    assert whole is not None and whole.group == "default"  # nothing cut off: no group passed


def test_a_recv_whose_locals_py_spy_could_not_read_is_not_from_any_source() -> None:
    """No ``src`` local at all (py-spy read none of them) is not ``src='None'``: its peer is not known."""
    a = parse((FrameLocals("recv", "/t/torch/distributed/distributed_c10d.py", 1, ()),))
    assert a is not None and a.p2p is None and a.text() == "recv"
