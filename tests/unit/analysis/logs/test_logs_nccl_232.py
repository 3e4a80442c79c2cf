"""NCCL 2.31/2.32 lines in ``logs``: the ATTN level (noteworthy, not an error), WARN and ATTN with the function in
parentheses, and the active diagnostics' ``NCCL DIAG`` report (tests/fixtures/nccl_232/INDEX.md says where each line's
text comes from)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.events import stream
from ncclcheck.analysis.logs.frame import frame_all
from ncclcheck.collectors.logfiles import Reading, sources
from ncclcheck.sources.logs import diagnose

HERE = FIXTURES / "nccl_232"


def report(name: str):  # type: ignore[no-untyped-def]
    return diagnose(sources([str(HERE / name)], Reading()))


def events(name: str):  # type: ignore[no-untyped-def]
    path = HERE / name
    return list(stream(frame_all(path.read_text().splitlines(), str(path))))


@pytest.mark.parametrize(
    ("name", "status", "found"),
    [
        ("attn_invalid_param.log", "pass", [("nccl-invalid-param", "warning")]),
        ("info_invalid_param.log", "pass", [("nccl-invalid-param", "warning")]),
        ("warn_func_ib.log", "fail", [("ib-retry-exceeded", "error")]),
        ("diag_ok.log", "pass", []),
        ("diag_p2p_partial.log", "pass", [("nccl-diag-issue", "warning")]),
        ("ras_diagnostics.log", "pass", [("nccl-diag-mismatch", "warning")]),
    ],
)
def test_each_line_gives_its_finding_and_none_other(name: str, status: str, found: list[tuple[str, str]]) -> None:
    got = report(name)
    assert got.status == status and [(f.id, f.severity) for f in got.findings] == found, got.findings


def test_attn_is_a_warning_from_nccl_with_its_host_and_source_never_an_error() -> None:
    attn = [e for e in events("attn_invalid_param.log") if "Invalid value" in e.text]
    assert len(attn) == 1 and attn[0].emitter == "nccl" and attn[0].severity == "warning"
    assert attn[0].host == "gpu-node07" and attn[0].text.startswith("misc/param.cc:95 ")
    finding = report("attn_invalid_param.log").findings[0]
    assert "NCCL_NTHREADS=abc" in finding.message and "512" in finding.message


def test_the_function_in_a_warn_line_is_read_as_part_of_nccl_s_header() -> None:
    warn = [e for e in events("warn_func_ib.log") if e.severity == "error"]
    assert len(warn) == 1 and warn[0].emitter == "nccl" and warn[0].host == "gpu-node07"
    assert warn[0].text.startswith("transport/net_ib/p2p.cc:688 NET/IB: Got completion")


def test_diag_lines_are_nccl_s_and_only_info_is_a_warning() -> None:
    got = {e.text.split("]")[0] + "]": e.severity for e in events("diag_p2p_partial.log") if "[" in e.text}
    assert got == {"NCCL DIAG [INFO]": "warning"}
    assert all(e.severity == "info" and e.emitter == "nccl" for e in events("diag_ok.log"))


def test_must_not_a_value_nccl_took_or_an_ok_diagnostic_is_a_finding(tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    log.write_text(
        "gpu-node07:48211:48211 [0] NCCL INFO NCCL_NTHREADS set by environment to 512.\n"
        "[OK]   CUDA driver version: 12080 consistent across 16 ranks in comm 0x7f3ac1d2e4b5a697\n"
        "NCCL DIAG [OK]   p2p: verified P2P access in both directions between every GPU pair (56 peer accesses)\n"
    )
    got = diagnose(sources([str(log)], Reading()))
    assert got.status == "pass" and got.findings == (), got.findings
