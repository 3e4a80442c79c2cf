"""run's point-to-point record (``collectors/control_hook_p2p.py``, stdlib only, copied beside the hook): on a
stand-in c10d module, pure. The real one is exercised by the zoo's real jobs (tests/integration/run/test_zoo.py)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from ncclcheck.collectors import control_hook_p2p
from ncclcheck.model.args import posted_from_json


class Work:
    def __init__(self) -> None:
        self.done = False

    def is_completed(self) -> bool:
        return self.done


def fresh() -> Any:
    """A copy of the record with its own state (each job's process has one)."""
    spec = importlib.util.spec_from_file_location("ncclcheck_hook_p2p_copy", control_hook_p2p.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def c10d(works: list[Work]) -> types.ModuleType:
    """A stand-in for torch.distributed.distributed_c10d: recv calls irecv, as torch's does."""
    module = types.ModuleType("fake_c10d")

    def isend(
        tensor: Any, dst: int | None = None, group: Any = None, tag: int = 0, group_dst: int | None = None
    ) -> Any:
        works.append(Work())
        return works[-1]

    def irecv(
        tensor: Any, src: int | None = None, group: Any = None, tag: int = 0, group_src: int | None = None
    ) -> Any:
        works.append(Work())
        return works[-1]

    def recv(tensor: Any, src: int | None = None, group: Any = None, tag: int = 0, group_src: int | None = None) -> int:
        module.irecv(tensor, src=src, group=group, tag=tag, group_src=group_src)
        return src or 0

    def send(
        tensor: Any, dst: int | None = None, group: Any = None, tag: int = 0, group_dst: int | None = None
    ) -> None:
        module.isend(tensor, dst=dst, group=group, tag=tag, group_dst=group_dst)

    def warn(op_name: str) -> None:
        pass

    module.isend, module.irecv, module.recv, module.send = isend, irecv, recv, send  # type: ignore[attr-defined]
    module._warn_not_in_group = warn  # type: ignore[attr-defined]
    module.get_global_rank = lambda group, r: {0: 4, 1: 6}[r]  # type: ignore[attr-defined]
    module._get_default_group = lambda: "world"  # type: ignore[attr-defined]
    module._get_process_group_name = lambda group: "7"  # type: ignore[attr-defined]
    module.get_process_group_ranks = lambda group: [4, 6]  # type: ignore[attr-defined]
    return module


def test_each_op_is_recorded_once_with_its_global_peer_its_line_and_its_state() -> None:
    record, works = fresh(), []
    module = c10d(works)
    record.install(module)
    module.isend("t", 1, tag=3)  # this very line is the site
    site_line = sys._getframe().f_lineno - 1
    module.recv("t", 0)  # recv calls irecv inside: one op, not two
    module.irecv("t", group="pair", group_src=1)
    answer = record.answer()
    read = posted_from_json(answer)
    assert read is not None
    assert [(o.op, o.call, o.peer, o.tag) for o in read.ops] == [
        ("send", "isend", 1, 3),
        ("recv", "recv", 0, 0),
        ("recv", "irecv", 6, 0),
    ]
    assert read.ops[0].site == f"{Path(__file__)}:{site_line}" and read.ops[2].group == "7"
    assert [o.state for o in read.ops] == ["pending", "completed", "pending"]
    works[0].done = True
    assert [o.state for o in posted_from_json(record.answer()).ops][:1] == ["completed"]  # type: ignore[union-attr]
    assert read.count("send", 1) == 1 and read.count("recv", 0) == 1 and read.count("recv", 6) == 1


def test_a_call_on_a_group_the_rank_is_not_in_is_kept_with_that_groups_ranks() -> None:
    record, works = fresh(), []
    module = c10d(works)
    record.install(module)

    def all_reduce(tensor: Any, group: Any = None) -> None:
        module._warn_not_in_group("all_reduce")

    all_reduce("t", group="pair")
    read = posted_from_json(record.answer())
    assert read is not None and [(x.call, x.ranks) for x in read.skipped] == [("all_reduce", (4, 6))]


def test_must_not_a_failing_record_never_reaches_the_job_and_wrapping_twice_records_once() -> None:
    record, works = fresh(), []
    module = c10d(works)
    module.get_global_rank = lambda group, r: 1 / 0  # type: ignore[attr-defined]
    record.install(module)
    record.install(module)  # a second install (a second import) wraps nothing again
    assert module.irecv("t", group_src=1) is works[-1]  # the op went through, unrecorded
    module.isend("t", 1)
    read = posted_from_json(record.answer())
    assert read is not None and [(o.call, o.peer) for o in read.ops] == [("isend", 1)]


def test_only_the_newest_ops_are_kept() -> None:
    record, works = fresh(), []
    module = c10d(works)
    record.install(module)
    for i in range(record.KEEP + 10):
        module.isend("t", 1, tag=i)
    read = posted_from_json(record.answer())
    assert read is not None and len(read.ops) == record.KEEP and read.ops[0].tag == 10
    assert read.count("send", 1) == record.KEEP + 10
