"""``ncclcheck smoke`` end to end on real torchrun processes with gloo: pass, drills, no orphans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from ncclcheck.cli import main
from ncclcheck.smoke.plan import OPS

QUICK = ["--backend", "gloo", "--sizes", "8:2K", "--iters", "2", "--warmup", "0"]


def smoke(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "report.json"
    code = main(["smoke", *QUICK, "--log-dir", str(tmp_path / "logs"), "--json", str(out), *args])
    return code, json.loads(out.read_text())


def no_orphans() -> None:
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if "ncclcheck.smoke" in " ".join(p.info["cmdline"] or [])]
    assert not leftovers, leftovers


@pytest.mark.parametrize("nproc", [2, 4])
def test_every_op_verified(tmp_path: Path, nproc: int) -> None:
    code, report = smoke(tmp_path, "--nproc", str(nproc))
    assert code == 0, report
    assert report["schema"] == "ncclcheck.smoke/1" and report["verdict"] == "pass"
    assert report["world_size"] == nproc and report["hang"] is None
    assert {r["op"] for r in report["results"]} == set(OPS)
    assert all(r["status"] == "ok" and r["wrong"] == 0 for r in report["results"])
    no_orphans()


def test_hang_drill_names_the_culprit_and_stacks(tmp_path: Path) -> None:
    code, report = smoke(
        tmp_path, "--nproc", "2", "--ops", "broadcast,all_reduce", "--timeout", "4", "--drill", "hang@1:all_reduce"
    )
    assert code == 1 and report["verdict"] == "fail"
    hang = report["hang"]
    assert hang["op"] == "all_reduce" and hang["culprits"] == [1]
    assert hang["ranks"]["0"]["state"] == "in_collective" and hang["ranks"]["0"]["collective"] == "all_reduce"
    assert hang["ranks"]["1"]["state"] == "not_in_collective"
    assert "drill_hang" in hang["ranks"]["1"]["call_site"]
    assert any("all_reduce" in line for line in hang["ranks"]["0"]["stack"])
    assert [r["status"] for r in report["results"] if r["op"] == "all_reduce"] == ["hang"]
    assert all(r["status"] == "ok" for r in report["results"] if r["op"] == "broadcast")
    no_orphans()


def test_crash_drill_is_an_error_with_last_output(tmp_path: Path) -> None:
    code, report = smoke(tmp_path, "--nproc", "2", "--ops", "broadcast,all_reduce", "--drill", "crash@1:all_reduce")
    assert code == 1
    assert report["hang"] is None
    message = report["findings"][0]["message"]
    assert message.startswith("rank 1 died (exit code 1)") and "ncclcheck drill: rank 1 crashed" in message
    assert [r["status"] for r in report["results"] if r["op"] == "all_reduce"] == ["error"]
    no_orphans()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--drill", "explode@1:all_reduce"], "expected KIND@RANK:OP"),
        (["--ops", "allreduce"], "unknown op(s) allreduce"),
        (["--nodes", "2"], "needs --master-addr"),
        (["--sizes", "big"], "'big' is not a size"),
    ],
)
def test_usage_errors(capsys: pytest.CaptureFixture[str], args: list[str], words: str) -> None:
    assert main(["smoke", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1
