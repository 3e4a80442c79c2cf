"""Every real fixture re-wrapped each way collectors and terminals deliver it reads as it does unwrapped (issue 25).

The wrappers are the one written text here; the lines inside them are the fixtures' own. Each fixture is taken as
its logical lines (a fixture pasted from a terminal is hard-wrapped already: joined where the reader joins it, and
M14's wraps at widths no terminal is known for, as INDEX.md says), so a launcher's prefix goes before each logical
line and a terminal's wrap cuts the whole prefixed line, as they would on the job's console. For each wrapping
``ncclcheck logs --json`` must give the same verdict status, root cause, ranks and culprits as on those lines
written out (the fixture's own verdict: a test holds them equal); a healthy fixture (INDEX.md calls it so) stays
"pass" with no error finding.

A prefix that names a rank (torchrun's ``[defaultN]:``, Open MPI's ``[1,N]<stderr>:``) is put only before a line
that already names rank N by its own prefix: put before every line it would move lines that belong to no rank
(the agent's, NCCL's own) to rank N, a different job from the one the fixture records. Prefixes without a rank
(a launcher's ``[tag]:``, Ray's, pdsh's, Kubernetes', timestamps) go before every line.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from ncclcheck.analysis.logs.frame import cut_after, rejoin
from ncclcheck.analysis.logs.frame import frame_all as frame_each
from ncclcheck.cli import main
from ncclcheck.model.logs import LogLine

FAILED = [
    *sorted((FIXTURES / "nccl_logs").glob("[1-5][0-9]_*.log"))[5:],  # 15-50 (01-14 are healthy)
    *sorted((FIXTURES / "nccl_logs_more").glob("M[1-4][0-9]_*.log"))[2:],  # M12-M40
    *sorted((FIXTURES / "torchrun").glob("*.log")),
]
HEALTHY = [
    *sorted((FIXTURES / "nccl_logs").glob("0[1-9]_*.log")),
    *sorted((FIXTURES / "nccl_logs").glob("1[0-4]_*.log")),
    *sorted((FIXTURES / "nccl_logs_more").glob("M0[1-9]_*.log")),
    *sorted((FIXTURES / "nccl_logs_more").glob("M1[01]_*.log")),
]

# the rank prefixes the reader takes a rank from ("[default3]:" names a local rank: a tag, as "[trainer3]:")
OWN_RANK = re.compile(r"^\[(?:default)?rank(\d+)\]:|^\[\d+,(\d+)\]<std(?:out|err)>:")
STAMP = "2024-05-01T10:00:00.123456789Z"


# Physical lines of a fixture that go on from the line before: a terminal of no common width wrapped them (INDEX.md:
# "Join terminal wraps first"), so the reader cannot tell (M14's are 209 and 192 columns long).
WRAPPED_IN_THE_PASTE = {"M14": {3, 7}}


def logical_lines(path: Path) -> list[str]:
    """The fixture's lines as the job wrote them: joined where the reader joins a terminal's wraps, and where the
    paste's own are known."""
    physical = path.read_text(encoding="utf-8").splitlines()
    joined: list[tuple[int, str]] = []
    for number, text in rejoin(enumerate(physical, 1)):
        if number in WRAPPED_IN_THE_PASTE.get(path.name[:3], ()):
            joined[-1] = (joined[-1][0], joined[-1][1] + text)
        else:
            joined.append((number, text))
    return [text for _, text in joined]


def every(prefix: str) -> Callable[[list[str]], list[str]]:
    return lambda lines: [prefix + line for line in lines]


def ranked(prefix: str) -> Callable[[list[str]], list[str]]:
    """``prefix`` (with ``{rank}``) before each line that names that rank by its own prefix; the others as they are."""

    def wrap(lines: list[str]) -> list[str]:
        return [prefix.format(rank=m[1] or m[2]) + line if (m := OWN_RANK.match(line)) else line for line in lines]

    return wrap


def cri(lines: list[str], piece: int = 0) -> list[str]:
    """Kubernetes' CRI log format (``/var/log/pods``); with ``piece``, each longer line is cut into partial (P)
    records of that many characters and a final (F) one, as containerd cuts a line longer than its buffer."""
    out = []
    for line in lines:
        cuts = [line[i : i + piece] for i in range(0, len(line), piece)] if piece and line else [line]
        out.extend(f"{STAMP} stderr {'P' if i < len(cuts) - 1 else 'F'} {cut}" for i, cut in enumerate(cuts))
    return out


VISIBLE = re.compile(r"\x1b\[[0-9;]*m")


def hard_wrapped(width: int) -> Callable[[list[str]], list[str]]:
    """A terminal's hard wrap: a line longer than the width is cut into width-long physical lines (columns are
    what shows: colour escapes take none)."""

    def wrap(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            while len(VISIBLE.sub("", line)) > width:
                cut, shown = 0, 0
                while shown < width:
                    escape = VISIBLE.match(line, cut)
                    cut, shown = (escape.end(), shown) if escape else (cut + 1, shown + 1)
                while escape := VISIBLE.match(line, cut):  # an escape at the cut stays with the shown text before it
                    cut = escape.end()
                out.append(line[:cut])
                line = line[cut:]
            out.append(line)
        return out

    return wrap


def crlf(lines: list[str]) -> list[str]:
    return [line + "\r" for line in lines]


def then(*steps: Callable[[list[str]], list[str]]) -> Callable[[list[str]], list[str]]:
    def wrap(lines: list[str]) -> list[str]:
        for step in steps:
            lines = step(lines)
        return lines

    return wrap


WRAPPINGS: dict[str, Callable[[list[str]], list[str]]] = {
    "launcher-tag": every("[trainer3]:"),  # torchrun --log-line-prefix-template "[${role_name}${local_rank}]:"
    "torchrun-default": ranked("[default{rank}]:"),  # torchrun --tee 3 around torch's own "[rankN]:"
    "mpirun": ranked("[1,{rank}]<stderr>:"),
    "ray": every("(RayWorkerWrapper pid=4242, ip=10.0.0.3) "),
    "pdsh": every("gpu-node-3: "),
    "clush-ip": every("10.0.0.3: "),
    "cri": cri,
    "cri-partial": lambda lines: cri(lines, 48),
    "iso-stamp": every("2024-05-01T10:00:00.123456Z "),
    "bracket-stamp": every("[2024-05-01 10:00:00,123] "),
    "syslog": every("May  1 10:00:00 gpu-node-3 python3[4242]: "),
    "journald-iso": every("2024-05-01T10:00:00+0000 gpu-node-3 python3[4242]: "),
    "journald-precise": every("May 01 10:00:00.123456 gpu-node-3 python3[4242]: "),
    "ansi-ray": every("\x1b[36m(RayWorkerWrapper pid=4242, ip=10.0.0.3)\x1b[0m "),
    "ansi-line": lambda lines: [f"\x1b[1;31m{line}\x1b[0m" if line else line for line in lines],
    "ansi-residue": every("[36m(RayWorkerWrapper pid=4242, ip=10.0.0.3)[0m "),  # GitHub drops the ESC
    "ansi-residue-spaced": every(" [36m(RayWorkerWrapper pid=4242) [0m "),  # or shows it as a space (M05)
    "wrap80": hard_wrapped(80),
    "wrap100": hard_wrapped(100),
    "wrap120": hard_wrapped(120),
    "pdsh+wrap80": then(every("gpu-node-3: "), hard_wrapped(80)),
    "ray+wrap120": then(every("(RayWorkerWrapper pid=4242, ip=10.0.0.3) "), hard_wrapped(120)),
    "torchrun-default+wrap100": then(ranked("[default{rank}]:"), hard_wrapped(100)),
    "cri-partial+wrap100": then(lambda lines: cri(lines, 48), hard_wrapped(100)),
    "ansi-ray+wrap80": then(every("\x1b[36m(RayWorkerWrapper pid=4242, ip=10.0.0.3)\x1b[0m "), hard_wrapped(80)),
    "syslog+wrap120": then(every("May  1 10:00:00 gpu-node-3 python3[4242]: "), hard_wrapped(120)),
    "crlf": crlf,  # a Windows console, a log saved by a Windows tool
    "wrap80+crlf": then(hard_wrapped(80), crlf),
    "cri-partial+crlf": then(lambda lines: cri(lines, 48), crlf),
    "ansi-residue+crlf": then(every("[36m(RayWorkerWrapper pid=4242, ip=10.0.0.3)[0m "), crlf),
}


def verdict(path: Path) -> dict[str, Any]:
    """``ncclcheck logs --json``'s verdict of a file, and the ids of its error findings."""
    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(["logs", "--json", str(path)])
    data: dict[str, Any] = json.loads(out.getvalue())
    found = data["verdict"]
    errors = sorted(f["id"] for f in data["findings"] if f["severity"] == "error")
    return {k: found.get(k) for k in ("status", "root_cause", "ranks", "culprits")} | {"errors": errors}


def written(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each failed fixture's verdict (less its error ids), read from its logical lines written out: the wrappings'
    unwrapped twin."""
    folder = tmp_path_factory.mktemp("plain")
    found = {path.name: verdict(written(folder / path.name, logical_lines(path))) for path in FAILED}
    return {name: {k: v for k, v in said.items() if k != "errors"} for name, said in found.items()}


def test_a_fixtures_lines_as_written_read_as_the_fixture(tmp_path: Path) -> None:
    """What the wrappings wrap is the fixture itself: its logical lines, written out, read as it does (but where
    the paste's own wraps are joined: M14 then reads as the watchdog's timeout INDEX.md says it is)."""
    changed = {}
    for path in FAILED + HEALTHY:
        if path.name[:3] not in WRAPPED_IN_THE_PASTE:
            as_written = verdict(written(tmp_path / path.name, logical_lines(path)))
            if as_written != verdict(path):
                changed[path.name[:3]] = as_written
    assert not changed, changed


@pytest.mark.parametrize("name", sorted(WRAPPINGS))
def test_a_failed_job_rewrapped_has_the_same_verdict(
    name: str, plain: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    wrap, changed = WRAPPINGS[name], {}
    for path in FAILED:
        after = verdict(written(tmp_path / path.name, wrap(logical_lines(path))))
        after.pop("errors")
        if after != plain[path.name]:
            changed[path.name[:3]] = (plain[path.name], after)
    assert not changed, changed


@pytest.mark.parametrize("name", sorted(WRAPPINGS))
def test_a_healthy_job_rewrapped_still_passes(name: str, tmp_path: Path) -> None:
    wrap, bad = WRAPPINGS[name], {}
    for path in HEALTHY:
        found = verdict(written(tmp_path / path.name, wrap(logical_lines(path))))
        if found["status"] != "pass" or found["errors"]:
            bad[path.name[:3]] = found
    assert not bad, bad


def test_the_fixture_lists_are_whole() -> None:
    assert (len(FAILED), len(HEALTHY)) == (36 + 29 + 3, 14 + 11)


def frame_all(lines: list[str], file: str) -> list[LogLine]:
    return list(frame_each(lines, file))


def test_a_cri_records_parts_are_joined_within_their_stream() -> None:
    """containerd cuts a line longer than its buffer into P records and a last F one; the other stream's records
    may come between."""
    lines = [
        f"{STAMP} stderr P [rank3]:[E1121 10:00:00.000000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught",
        f"{STAMP} stdout F step 40 loss 1.02",
        f"{STAMP} stderr P  collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1,",
        f"{STAMP} stderr F  NumelOut=1, Timeout(ms)=600000) ran for 600015 milliseconds before timing out.",
    ]
    framed = [(line.line, line.text, line.rank) for line in frame_all(lines, "pod.log")]
    assert framed[0] == (2, "step 40 loss 1.02", None)
    assert framed[1][0] == 1 and framed[1][2] == 3 and "caught collective" in framed[1][1]
    assert framed[1][1].endswith(
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600015 milliseconds before timing out."
    )
    assert not cut_after(lines[0]) and cut_after(lines[1])


@pytest.mark.parametrize("width", [80, 100, 120])
@pytest.mark.parametrize(
    "after",
    [
        "FATAL: the checkpoint writer lost its lease",  # a line's opening word
        "    train(args)",  # a traceback's code line
        '  File "/job/train.py", line 41, in <module>',
        "[E1121 10:00:00.000000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout",
        "node3:999:999 [2] NCCL WARN Call to connect returned Connection refused, retrying",
        " [0] NCCL INFO Channel 00/02 :    0   1",  # NCCL 2.5's header, one space in
        "Error: the loader died",  # after a line ending in a digit or a space: not an exception's name cut
    ],
)
def test_a_line_a_terminals_width_long_never_takes_a_real_line(width: int, after: str) -> None:
    first = ("step 7 | loss 2.31 | " + "x" * width)[: width - 2] + " 1"
    assert len(frame_all([first, after], "x.log")) == 2


@pytest.mark.parametrize(
    ("first", "rest"),
    [
        ("node1:11:12 [0] NCCL INFO Channel 00/0 : 0", "[0] -> 7[7] via P2P/CUMEM/read"),  # "[N] " is no prefix here
        ("ib_plugin.c:1007 NET/IB : Got completion from peer 10.1.32.3<54891> with status=12 opcode=0", " (Recv)"),
        ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buf", "fer.cc:81] Timed out waiting"),
        ("torch.distributed.DistBackend", "Error: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"),
        ("z-pc:909608:910337 [0] tra", "nsport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle"),
    ],
)
def test_a_wraps_rest_is_glued_whatever_it_starts_with(first: str, rest: str) -> None:
    ray = "\x1b[36m(RayWorkerWrapper pid=4242, ip=10.0.0.3)\x1b[0m "  # colour codes take no column
    wide = ray + " " * (120 - len(first) - len("(RayWorkerWrapper pid=4242, ip=10.0.0.3) ")) + first
    assert frame_all([wide, rest], "x.log") == frame_all([wide + rest], "x.log")
