"""What users hand ``ncclcheck logs`` that only a real process hands it: a FIFO and a process
substitution, a reader that leaves (exit 141), an unreadable file in a directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from conftest import FIXTURES
from log_inputs import ERROR, TRAIN, logs


@pytest.mark.integration
def test_a_fifo_and_a_process_substitution_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as out:
            out.write(TRAIN.format(i=1) + ERROR + "\n")

    writer = threading.Thread(target=write)
    writer.start()
    code, report = logs(capsys, str(fifo))
    writer.join(timeout=30)
    assert code == 1 and report["verdict"]["root_cause"] == "peer-closed"
    bash = shutil.which("bash")
    if bash:  # <(cmd): a /dev/fd path, as kubectl logs users write it
        cmd = f"{sys.executable} -m ncclcheck logs --json <(printf '%s\\n' '{ERROR}')"
        done = subprocess.run([bash, "-c", cmd], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and json.loads(done.stdout)["verdict"]["root_cause"] == "peer-closed", done.stderr


@pytest.mark.integration
def test_an_unreadable_file_in_a_directory_is_a_note_and_the_rest_is_read() -> None:
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to read as another user")
    base = Path(tempfile.mkdtemp(prefix="ncclcheck-unreadable-", dir="/tmp"))  # pytest's tmp is root-only
    try:
        _read_as_nobody(base)
    finally:
        shutil.rmtree(base)


def _read_as_nobody(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text(ERROR + "\n")
    (job / "rank1.log").write_text(TRAIN.format(i=1))
    (job / "rank1.log").chmod(0o600)
    os.chmod(tmp_path, 0o755)
    job.chmod(0o755)
    (job / "rank0.log").chmod(0o644)
    cmd = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        sys.executable,
        "-m",
        "ncclcheck",
        "logs",
        "--json",
        str(job),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/")
    if done.returncode not in (0, 1, 4) or not done.stdout.strip():
        pytest.skip(f"cannot run ncclcheck as nobody here: {done.stderr.strip()[-200:]}")
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["verdict"]["root_cause"] == "peer-closed"
    assert any("rank1.log: not readable by this user" in n for n in report["notes"])


MODES = ([], ["--json"], ["--events"], ["--events", "--json"], ["--events", "--severity", "all"])


@pytest.mark.integration
@pytest.mark.parametrize("mode", MODES, ids=lambda m: " ".join(m) or "report")
def test_every_output_mode_ends_141_on_a_closed_pipe(mode: list[str]) -> None:
    """`ncclcheck logs ... | head`: the reader is gone before a byte is written; every mode exits 141, no traceback
    (rich's own answer, SystemExit(1), would read as "a problem found")."""
    log = FIXTURES / "real_failures" / "gloo_size_abort.log"
    read, write = os.pipe()
    os.close(read)  # a real pipe with no reader left: the first write fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ncclcheck", "logs", *mode, str(log)],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write)
    assert done.returncode == 141 and b"Traceback" not in done.stderr, done.stderr


@pytest.mark.integration
@pytest.mark.parametrize("mode", [m for m in MODES if "--events" in m], ids=" ".join)
def test_a_reader_that_takes_one_line_and_leaves_gets_141(tmp_path: Path, mode: list[str]) -> None:
    """`ncclcheck logs --events big.log | head -1`: far more than a pipe holds (64 KiB) is written; the reader takes
    one line and closes its end, so a later write fails, whenever it comes: the exit is 141, no traceback."""
    one = (FIXTURES / "real_failures" / "gloo_size_abort.log").read_text()
    log = tmp_path / "big.log"
    log.write_text(one * 400)  # thousands of warning and error events: megabytes listed
    proc = subprocess.Popen(
        [sys.executable, "-m", "ncclcheck", "logs", *mode, str(log)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    assert proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and b"Traceback" not in err, err
