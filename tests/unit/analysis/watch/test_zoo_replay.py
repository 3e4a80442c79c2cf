"""The zoo's real evidence, replayed (pure): tests/fixtures/zoo/<case>.<how>.jsonl are the agent lines of real hung
torchrun/gloo jobs (tools/record_zoo.py), under ``ncclcheck run`` (its hook's record of every rank's point-to-point
ops and skipped calls) or beside plain torchrun (``watch --agent``: no hook). Judged as the job-wide viewer judges a
node's lines, each must give its truth: without the hook, where the stacks cannot tell, they must say so and blame
nobody wrongly."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import conftest
import pytest
from watch_states import all_in, job, sample, stack, states
from zoo_cases import ZOO, Truth

from ncclcheck.analysis.watch.judge import Judging, hangs_in
from ncclcheck.analysis.watch.nodes import merge
from ncclcheck.collectors.agent_streams import replay
from ncclcheck.model.agent_line import AgentLines, Held
from ncclcheck.model.findings import Finding

FIXTURES = conftest.FIXTURES / "zoo"
# Without run's hook the stacks see less: what each such case must (and must not) say instead
WATCHED = {
    "p2p-cycle": Truth(2, "p2p-deadlock", (0, 1), ("deadlock in the code",)),  # blocking recv: locals name the peers
    "p2p-batch-cycle": Truth(2, "stalled", (), ("not ruled out",)),  # work.wait(): no peer in any stack
    "wrong-peer": Truth(3, "", (), ()),  # no peers either: never the waiting rank, never the transport alone
    "wrong-tag": Truth(2, "p2p-tag-mismatch", (0, 1), ("tags differ",)),  # blocking calls: tags in the locals
    "never-waited": Truth(2, "", (), ()),
    "wrong-group": Truth(4, "subgroup-wait", (), ("cannot tell which of rank 1-3",)),
    "sub-mismatch": Truth(2, "mismatch", (), ("mismatched collectives",)),
}
LINES = sorted(FIXTURES.glob("*.jsonl"))


def judged(path: Path) -> tuple[Finding, ...]:
    """The last look of the recorded lines, judged at the end of its window as ``--once`` would."""
    streams = replay(str(path))
    last = max(r.received for r in streams.reports.values())
    state = merge(streams.reports, streams.text, last, Judging(3.0, final=True, window_s=3.0), 1.0)
    return state.findings


@pytest.mark.parametrize("path", LINES, ids=[p.stem for p in LINES])
def test_recorded_zoo_evidence_gives_its_truth(path: Path) -> None:
    case, how = path.stem.rsplit(".", 1)
    truth = WATCHED[case] if how == "watch" and case in WATCHED else ZOO[case]
    findings = judged(path)
    if truth.crash:  # the end, timed by run's sampler from the start: the rank that began it, never rank 0
        done = next(f for f in findings if f.id == "finished")
        assert done.culprits == truth.culprits, done.message
        return
    hangs = hangs_in(findings)
    blamed = {r for f in hangs for r in f.culprits}
    if not truth.kind:  # where the evidence cannot decide: nobody is blamed, and the network is never the answer
        assert not blamed and "stalled" not in {f.id for f in hangs}, [(f.id, f.message) for f in findings]
        return
    assert hangs, [(f.id, f.message) for f in findings]
    first = hangs[0]
    assert (first.id, first.culprits) == (truth.kind, truth.culprits), (first.id, first.culprits, first.message)
    for word in truth.words:
        assert word in first.message, (word, first.message)
    if first.chain:
        assert all(h.who for h in first.chain) and first.end is not None


def test_every_case_of_the_zoo_has_recorded_evidence() -> None:
    recorded: dict[str, Any] = {p.stem.rsplit(".", 1)[0] for p in LINES}  # type: ignore[assignment]
    missing = [c for c, t in ZOO.items() if not t.crash and c not in recorded]
    assert not missing, f"record them: python tools/record_zoo.py {' '.join(missing)}"


def test_compacted_lines_read_as_the_last_lines_of_the_whole_recording(tmp_path: Path) -> None:
    """tools/record_zoo.py keeps a recording's last lines, the first of them carrying what a viewer held from the
    lines before: with schema /3 most ranks come as rows, so the first kept line carries each rank in full again
    (found by a reviewer: it crashed on the rows, and kept rows no reader could complete)."""
    sys.path.insert(0, str(conftest.REPO / "tools"))
    import record_zoo

    lines = AgentLines("vm")
    waiting = states(job(2), *[all_in(2, "all_reduce")] * 3)
    straggler = states(job(2), *[all_in(2, "all_reduce", r1=sample(1, stack(None, 40, "load_batch")))] * 3)
    written = [json.dumps(lines.line(waiting if i < 4 else straggler, 1.8e9 + i)) for i in range(12)]
    path = tmp_path / "case.run.jsonl"
    path.write_text("".join(line + "\n" for line in written))
    whole = Held()
    for line in written:
        expected = whole.read(json.loads(line), -1.0)
    record_zoo.compact(path, keep=3)
    kept = path.read_text().splitlines()
    assert len(kept) == 3 and all(isinstance(r, dict) for r in json.loads(kept[0])["ranks"])
    alone = Held()
    for line in kept:
        got = alone.read(json.loads(line), -1.0)
    assert got is not None and expected is not None and got.views == expected.views
