"""Lines that said less than they seemed to, each on the real input that produced it (the newcomer's issue 24,
point 6): "gloo binds  (GLOO_SOCKET_IFNAME)" with the value missing, the crash drill's row "broadcast 0 0", and
"peer closed its connection (?)"."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.diagnose import analyse
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.analysis.smoke.summary import failed_rows
from ncclcheck.cli import main
from ncclcheck.model.smoke import OpResult, RankProgress, SmokeSummary
from ncclcheck.views.console import make_console
from ncclcheck.views.smoke import results_table

TREE = FIXTURES / "sysfs" / "scenario1_ib_roce_down"  # interfaces: eth0 10.10.0.5, ib0, ens1f1np1, ...


def gloo_check(capsys: pytest.CaptureFixture[str], value: str) -> dict[str, Any]:
    main(["env", "--root", str(TREE), "--set", f"GLOO_SOCKET_IFNAME={value}", "--json"])
    checks = json.loads(capsys.readouterr().out)["checks"]
    found: dict[str, Any] = next(c for c in checks if c["id"] == "net.gloo")
    return found


def test_gloo_with_no_interface_found_says_nothing_empty(capsys: pytest.CaptureFixture[str]) -> None:
    check = gloo_check(capsys, "nosuch")
    assert check["status"] == "fail" and "'nosuch' is not an interface with an address here" in check["summary"]
    assert not any("binds" in line or "  (" in line for line in check["details"]), check["details"]


def test_gloo_with_one_item_missing_names_what_resolves_and_binds_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    check = gloo_check(capsys, "eth0,nosuch")
    assert check["status"] == "fail"  # gloo raises at 'nosuch': it binds nothing, eth0 included
    assert "of GLOO_SOCKET_IFNAME='eth0,nosuch', eth0(10.10.0.5) would resolve" in check["details"]
    assert not any("gloo binds" in line for line in check["details"]), check["details"]
    assert gloo_check(capsys, "eth0")["summary"] == "gloo binds eth0(10.10.0.5) (GLOO_SOCKET_IFNAME)"


def progress(rank: int, event: str, op: str | None, size: int = 0) -> RankProgress:
    return RankProgress(rank, 100 + rank, "vm", event, op, size, op if event == "start" else None, 1.0, False, ())


def table_rows(results: tuple[OpResult, ...]) -> list[list[str]]:
    summary = SmokeSummary(3, 1, 0, "gloo", results, None, (), (), (), "/tmp/logs", False)
    out = io.StringIO()
    make_console(out).print(results_table(summary))
    return [line.split() for line in out.getvalue().splitlines() if line.split()[:1] in (["broadcast"], ["init"])]


def test_the_crash_drills_row_of_an_op_no_rank_entered_says_not_run() -> None:
    """``--drill crash@N:broadcast`` when rank N raised before the others took their first step: its drill event
    has no size, and the row read "broadcast 0 0" (with N = 0) or "init 0 0" (an op that had finished)."""
    for drilled in (0, 2):
        ranks = tuple(
            progress(n, "drill", "broadcast") if n == drilled else progress(n, "done", "init") for n in range(3)
        )
        (row,) = failed_rows(ranks, None, True)
        assert (row.op, row.bytes, row.status) == ("broadcast", 0, "error")
        (cells,) = table_rows((row,))
        assert cells[:3] == ["broadcast", "-", "-"] and "not run" in " ".join(cells), cells


def test_the_crash_drills_row_of_an_op_ranks_entered_gives_its_size_and_says_failed() -> None:
    """The same drill as it usually runs: ranks 0 and 1 wait in broadcast at 8 B when rank 2 raises."""
    ranks = (
        progress(0, "start", "broadcast", 8),
        progress(1, "start", "broadcast", 8),
        progress(2, "drill", "broadcast"),
    )
    (row,) = failed_rows(ranks, None, True)
    (cells,) = table_rows((row,))
    assert cells[:3] == ["broadcast", "8", "-"] and "failed" in cells, cells
    (init,) = table_rows(failed_rows((progress(0, "start", "init"),), None, True))
    assert init[:3] == ["init", "0", "-"] and "failed" in init, init  # init ran and failed: not "not run"


def messages(line: str) -> list[str]:
    return [f.message for f in analyse(frame_all([line], "rank0.log")).findings]


def test_a_closed_connection_that_names_no_peer_says_so_in_words() -> None:
    # torch's NCCL watchdog (ProcessGroupNCCL.cpp) when the store's connection went: no peer in the line
    said = messages(
        "[rank0]:[E1121 10:00:00.000 ProcessGroupNCCL.cpp:1000] [PG 0 Rank 0] Process group watchdog thread"
        " terminated with exception: Connection closed by peer"
    )
    assert said == ["a peer closed its connection (the line does not name the peer): usually that process exited"]


def test_gloos_closed_connection_names_its_peer() -> None:
    # as a real torch 2.13 crash drill printed it (gloo's tcp/pair.cc)
    said = messages(
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by"
        " peer [127.0.0.1]:8910. This is typically caused by a remote worker crashing."
    )
    assert said == ["a peer process closed the gloo connection (127.0.0.1): it crashed or exited"]
    assert not any("?" in m for m in said)
