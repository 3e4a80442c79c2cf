"""What users hand ``ncclcheck logs``: cut .gz files, pipes, binaries and unreadable files among the logs.

Whatever cannot be read whole is said in a note; a log read only in part is never "pass".
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES
from log_inputs import ERROR, TRAIN, logs

from ncclcheck.cli import main


def cut_gz(path: Path, text: str) -> None:
    whole = gzip.compress(text.encode(), compresslevel=1)
    path.write_bytes(whole[: len(whole) // 2])


def test_a_cut_gz_is_read_up_to_the_cut_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [TRAIN.format(i=i) for i in range(20_000)]
    cut_gz(tmp_path / "a.log.gz", ERROR + "\n" + "".join(lines))
    code, report = logs(capsys, str(tmp_path / "a.log.gz"))
    assert code == 1 and report["verdict"]["root_cause"] == "peer-closed"
    assert report["lines"] > 1000 and any("cut short" in n for n in report["notes"])


def test_a_cut_gz_without_an_error_is_never_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut_gz(tmp_path / "b.log.gz", "".join(TRAIN.format(i=i) for i in range(20_000)))
    code, report = logs(capsys, str(tmp_path / "b.log.gz"))
    assert code == 4 and report["verdict"]["status"] == "unknown" and report["lines"] > 1000
    main(["logs", str(tmp_path / "b.log.gz")])
    out = capsys.readouterr().out
    assert "✓ no problem found in" not in out and "not everything could be" in " ".join(out.split())


def test_binary_files_in_a_job_directory_are_named_and_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rank0.log").write_text(TRAIN.format(i=1))
    (tmp_path / "core.4242").write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 5000 + b"NCCL WARN not a log line")
    (tmp_path / "blob").write_bytes(bytes(range(256)) * 40)
    (tmp_path / "padded.log").write_bytes(b"\0" * 9000 + TRAIN.format(i=2).encode())  # a crash's NUL padding: a log
    code, report = logs(capsys, str(tmp_path))
    assert code == 0 and report["verdict"]["status"] == "pass"  # a binary is not a log: nothing of the logs is missing
    notes = " ".join(report["notes"])
    assert "core.4242: an ELF binary or core dump" in notes and "blob: a binary file" in notes
    assert report["files"] == [str(tmp_path / "padded.log"), str(tmp_path / "rank0.log")]


def test_the_watch_agent_stream_of_a_run_dir_is_not_read_as_a_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ncclcheck run` keeps its live agent's states beside the logs; their stacks say "Exception" (a frame of
    the job's code, a note) where the job raised nothing: a healthy run must stay "pass"."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "launcher.log").write_text("".join(TRAIN.format(i=i) for i in range(3)))
    state = {
        "ranks": [{"rank": 0, "stack": [{"function": "handle_Exception", "file": "train.py", "line": 3}]}],
        "notes": ["py-spy: Error: Operation not permitted"],
    }
    (tmp_path / "watch-agent.jsonl").write_text(json.dumps(state) + "\n")
    code, report = logs(capsys, str(tmp_path))
    assert (code, report["verdict"]["status"]) == (0, "pass"), report
    assert report["files"] == [str(tmp_path / "logs" / "launcher.log")]


def test_a_log_with_only_facts_is_a_pass_and_a_warning_is_called_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A healthy RAS report is an info finding: "✓", never "warnings below"; a real warning still says "!"."""
    ras = FIXTURES / "ras" / "healthy_32gpu_status.txt"
    assert main(["logs", str(ras)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("✓ no problem found") and "warnings" not in out and "ras-all-ok" in out
    gdr = tmp_path / "gdr.log"
    gdr.write_text("node1:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)\n")
    assert main(["logs", str(gdr)]) == 0
    assert capsys.readouterr().out.startswith("! no error, but warnings below")


def test_a_run_dir_s_own_files_are_not_read_as_the_job_s_logs(tmp_path: Path) -> None:
    """run's hook and its bytecode, its agent lines, an incident's captures (RAS, Xid lines that may predate the job,
    nvidia-smi) and the Flight Recorder copies kept with each hang: none is the job's log, none makes a note."""
    from ncclcheck.collectors.logfiles import Reading, sources

    run = tmp_path / "run"
    hook = run / "control" / "hook"
    (hook / "__pycache__").mkdir(parents=True)
    (hook / "sitecustomize.py").write_text("raise RuntimeError('in ncclcheck's hook source')\n")
    (hook / "__pycache__" / "sitecustomize.cpython-311.pyc").write_bytes(b"\xa7\r\r\n\0\0\0\0" + bytes(range(256)))
    hang = run / "control" / "hang-20261127-001155-1"
    hang.mkdir()
    (hang / "xid.txt").write_text("[  12.3] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n")
    (hang / "ras.txt").write_text("Job summary\n===========\n")
    (hang / "nvidia-smi-q.txt").write_text("==============NVSMI LOG==============\n")
    (hang / "fr_rank_0").write_bytes(b"\x80\x02}q\x00.")
    early = run / "fr" / "early-1"
    early.mkdir(parents=True)
    (early / "rank_0").write_bytes(b"\x80\x02}q\x00.")
    (run / "logs").mkdir()
    (run / "logs" / "rank0.log").write_text("[rank0]: RuntimeError: the job's own error\n")
    (run / "mine").mkdir()
    (run / "mine" / "__init__.py").write_text("")
    (run / "early-notes").mkdir()
    (run / "early-notes" / "notes.log").write_text("a user's folder that happens to start with early-\n")
    reading = Reading()
    names = sorted(os.path.relpath(s.path, run) for s in sources([str(run)], reading))
    assert names == ["early-notes/notes.log", "logs/rank0.log", "mine/__init__.py"], names
    assert reading.notes == [], reading.notes


@pytest.mark.parametrize(
    "content", [b"", b"\n", b"   \n\t\n\r\n", b"\0" * 512 + b"\n"], ids=["empty", "newline", "whitespace", "nul-pad"]
)
def test_an_input_with_nothing_in_it_is_no_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    """Nothing read is not a pass: the input is named and the verdict stays open (exit 4), never "✓"."""
    log = tmp_path / "rank0.log"
    log.write_bytes(content)
    assert main(["logs", str(log)]) == 4
    out = capsys.readouterr().out
    assert out.startswith(f"? nothing read: {log} is empty") and "no problem found" not in out
    code, report = logs(capsys, str(log))
    assert (code, report["verdict"]["status"]) == (4, "unknown")
    assert any(str(log) in n and "empty" in n for n in report["notes"]), report["notes"]


def test_an_empty_stdin_is_no_verdict(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`kubectl logs gone-pod | ncclcheck logs -`: the pipe brought nothing, and that is said, with the input."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main(["logs", "-"]) == 4
    assert capsys.readouterr().out.startswith("? nothing read: <stdin> is empty")


def test_events_of_empty_inputs_say_nothing_was_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.log").write_text("")
    (tmp_path / "b.log").write_text("\n\n")
    assert main(["logs", "--events", str(tmp_path)]) == 4
    err = capsys.readouterr().err
    assert "nothing read" in err and f"{tmp_path / 'a.log'}: empty" in err and f"{tmp_path / 'b.log'}: empty" in err


def test_an_empty_input_beside_a_log_takes_nothing_from_its_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Must not: an empty rank log beside others is named in a note; the others' verdict (fail, or pass) stands."""
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "failed.log").write_text(ERROR + "\n")
    code, report = logs(capsys, str(tmp_path / "empty.log"), str(tmp_path / "failed.log"))
    assert (code, report["verdict"]["root_cause"]) == (1, "peer-closed")
    assert any("empty.log: empty" in n for n in report["notes"])
    (tmp_path / "healthy.log").write_text("".join(TRAIN.format(i=i) for i in range(3)))
    code, report = logs(capsys, str(tmp_path / "empty.log"), str(tmp_path / "healthy.log"))
    assert (code, report["verdict"]["status"]) == (0, "pass"), report
    assert main(["logs", "--events", str(tmp_path / "empty.log"), str(tmp_path / "healthy.log")]) == 0


def test_a_log_with_blank_lines_and_one_of_text_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Must not: blank lines before a line of text make a log, not an empty one."""
    log = tmp_path / "a.log"
    log.write_text("\n\n   \n" + TRAIN.format(i=1))
    code, report = logs(capsys, str(log))
    assert (code, report["verdict"]["status"], report["notes"]) == (0, "pass", []), report


TRACEBACK = (
    "Traceback (most recent call last):\r\n"
    '  File "/work/train.py", line 41, in <module>\r\n'
    "    batch = torch.stack(samples)\r\n"
    "RuntimeError: stack expects each tensor to be equal size, but got [3, 224, 224] at entry 0 and [3, 224, 225]"
    " at entry 5\r\n"
)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"])
def test_a_log_written_as_utf16_or_32_is_read_as_the_same_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], encoding: str
) -> None:
    """Windows PowerShell 5 writes UTF-16 with `>` and Tee-Object (with a byte-order mark; "utf-16-le" and "-be" are
    without one): read as the text it is, the same report as UTF-8's, never "no problem found" over an error."""
    plain, wide = tmp_path / "plain.log", tmp_path / f"wide-{encoding}.log"
    text = TRAIN.format(i=1).replace("\n", "\r\n") + TRACEBACK
    plain.write_bytes(text.encode("utf-8"))
    wide.write_bytes(text.encode(encoding))
    code, report = logs(capsys, str(wide))
    expected_code, expected = logs(capsys, str(plain))
    assert (code, report["verdict"]) == (expected_code, expected["verdict"]) == (1, expected["verdict"])
    assert report["verdict"]["root_cause"] == "python-exception" and report["lines"] == expected["lines"] == 5


def test_must_not_a_utf8_log_with_nul_padding_or_a_nul_is_read_as_utf16(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    padded = tmp_path / "padded.log"  # a crash's NUL padding before the text, and a NUL within it
    padded.write_bytes(b"\0" * 64 + (TRAIN.format(i=1) + ERROR + "\0\n").encode())
    code, report = logs(capsys, str(padded))
    assert code == 1 and report["verdict"]["root_cause"] == "peer-closed", report["verdict"]
