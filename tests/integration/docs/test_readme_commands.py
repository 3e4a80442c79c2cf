"""Every command line in the code blocks a user reads (README.md and the docs/ pages), run here as written or skipped
with its reason.

The pure tier reads the fenced blocks of README.md and docs/*.md and holds the classification to them: a command
line that is neither run nor given a reason, or a reason for a line no page shows any more, fails. A block whose
lines start with ``$ `` shows a command and what it printed: its ``$`` lines are the commands, the rest output.
Every ``ncclcheck`` invocation the pages show (code blocks and inline code, skipped ones too) is parsed by the real
argument parser, so a flag that no longer exists fails without running anything. The integration tier runs the
runnable lines in one prepared working directory, in order, around one shared gloo job (the docs' own
``ncclcheck run --dir runs/exp7 ...``): each must end with an exit code its page documents for it, print what the
README shows it printing, and print no traceback. The install recipe runs in a fresh clone against a throwaway
environment that already has the job's torch, with ``--dry-run``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from conftest import FIXTURES, REPO

from ncclcheck import exits
from ncclcheck.cli import COMMANDS, build_parser, main

README = REPO / "README.md"
PAGES = (README, *sorted((REPO / "docs").glob("*.md")))  # everything a user reads: the README and the docs site
Phase = Literal["job", "during", "after", "alone"]
PHASES: tuple[Phase, ...] = ("job", "during", "after", "alone")  # the order the integration tier runs them in
ANY_VERDICT = frozenset({exits.OK, exits.PROBLEM})  # env on whatever machine runs this: a check may fail here
# Blocks that show what ncclcheck prints or writes, not what to type: told by their first line.
OUTPUT_BLOCKS = {
    '{"schema": "ncclcheck.run/1"': "run's report.json, as it is written",
    "! slow-rank:": "a finding, as watch prints it",
    "✗ hang (rank 0-1):": "run's verdict on the H100, as it printed it (tests/fixtures/gpu_check/timing/p2p/run.out)",
}


@dataclass(frozen=True)
class Runs:
    """Run here by the integration tier, in ``phase`` order (the shared ``job``, lines ``during`` it, lines
    ``after`` it ended, then lines that stand ``alone``); it must end with one of ``codes``. ``given`` replaces
    what only the user has (a path of theirs, their torchrun arguments) with a real value, ``{work}`` being the
    prepared working directory; relative paths (``job-1234/``, ``train.py``, ``lines.jsonl``, ``~``) are real
    files there, so most lines run exactly as written."""

    codes: frozenset[int]
    phase: Phase = "alone"
    given: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    says: tuple[str, ...] = ()  # what a page shows it printed, which it must print here too
    # `--on-hang exit` SIGTERMs the launcher: torchrun's own traceback (its SignalException) is the job's output
    ends_launcher: bool = False


@dataclass(frozen=True)
class InClone:
    """An install line: run with ``--dry-run`` in a fresh clone, against an environment that has the job's torch."""


@dataclass(frozen=True)
class Skipped:
    reason: str


PLANS: dict[str, Runs | InClone | Skipped] = {
    # Installation and quick start
    "pip install --dry-run .": InClone(),
    "pip install .": InClone(),
    "ncclcheck --help": Runs(frozenset({exits.OK})),
    "pip install build && python -m build --wheel && pip install dist/ncclcheck-*.whl": Skipped(
        "installs build into the environment that runs it and fetches hatchling; the same `pip install .` of the "
        "checkout runs in a fresh clone"
    ),
    "make demo": Skipped(
        "creates and installs .venv (torch too when it has none); its two commands run here as the README's own lines"
    ),
    "make test": Skipped("the whole suite, this test included"),
    # env
    "ncclcheck env": Runs(ANY_VERDICT),
    "ncclcheck env --master-addr 10.0.0.1 --master-port 29500 --nproc 8 --nnodes 2 --json": Runs(ANY_VERDICT),
    "python3 probes/save_tree.py /tmp/node7": Runs(frozenset({exits.OK}), given=(("/tmp/node7", "{work}/node7"),)),
    "ncclcheck env --root /tmp/node7": Runs(ANY_VERDICT, given=(("/tmp/node7", "{work}/node7"),)),
    "ncclcheck env --root /tmp/node7 --set NCCL_IB_HCA==mlx5_2": Runs(
        ANY_VERDICT, given=(("/tmp/node7", "{work}/node7"),)
    ),
    # smoke
    "ncclcheck smoke --nproc 2 --backend gloo": Runs(
        frozenset({exits.OK}), says=("✓ pass: 91 op/size results verified",)
    ),
    "ncclcheck smoke --nproc 2 --backend gloo --drill hang@1:all_reduce --timeout 5": Runs(frozenset({exits.PROBLEM})),
    "ncclcheck smoke --nodes 2 --node-rank 0 --master-addr node0": Skipped("two nodes: node0 is the user's host"),
    "ncclcheck smoke --nodes 2 --node-rank 1 --master-addr node0": Skipped("two nodes: node0 is the user's host"),
    "ncclcheck smoke --isolate --nodes 4 --node-rank 0 --master-addr node0": Skipped(
        "four nodes: node0 is the user's host (tests/test_smoke_isolate_hosts.py runs it on test hosts)"
    ),
    # logs
    "ncclcheck logs job-1234/": Runs(frozenset({exits.PROBLEM})),
    # the README's example: `tests` in the working directory is the checkout's
    "ncclcheck logs tests/fixtures/torchrun/two_nodes/": Runs(
        frozenset({exits.PROBLEM}),
        says=("✗ root cause (rank 3): RuntimeError: rank 3 gives up: the shard it was given is empty",),
    ),
    # `kubectl` on PATH here prints a recorded log (real_failures/thread_died_rank1.log) for `kubectl logs`
    "kubectl logs trainer-0 | ncclcheck logs - --json": Runs(frozenset({exits.PROBLEM})),
    "ncclcheck logs ~/.cache/torch/ rank*.log": Runs(frozenset({exits.PROBLEM})),
    "ncclcheck logs runs/node*/": Runs(frozenset({exits.OK}), phase="after"),
    # run
    "ncclcheck run -- torchrun --nproc-per-node 8 train.py --lr 3e-4": Runs(
        frozenset({exits.OK}),
        # 8 ranks are an 8-GPU node's; 2 gloo ranks here. torchrun's static rendezvous takes its port from
        # PET_MASTER_PORT (its --master-port), so a job of another test on 29500 cannot take it.
        given=(("--nproc-per-node 8", "--nproc-per-node 2"),),
        env=(("PET_MASTER_PORT", "{port}"),),
    ),
    # the shared job: train.py (tests/workers/readme_train.py) steps until a STOP file appears; `...` is the
    # torchrun arguments the user elides (--standalone: a free rendezvous port)
    "ncclcheck run --dir runs/exp7 --stall 120 -- python -m torch.distributed.run ... train.py": Runs(
        frozenset({exits.OK}), phase="job", given=(("...", "--standalone --nproc-per-node 2"),)
    ),
    # the README's example of a hang caught live: rank 2 sleeps outside any collective; `--on-hang exit` ends
    # torchrun with SIGTERM, and torchrun's own code then is 1 (its SignalException)
    "MODE=straggler ncclcheck run --stall 10 --on-hang exit -- torchrun --nproc-per-node 3 tests/workers/watch_job.py": (
        Runs(
            frozenset({exits.PROBLEM}),
            env=(("PET_MASTER_PORT", "{port}"),),
            ends_launcher=True,
            says=("✗ hang (rank 2): rank 0-1 wait in all_reduce at watch_job.py:31 for rank 2",),
        )
    ),
    "srun ncclcheck run --dir /shared/runs/$SLURM_JOB_ID/$SLURMD_NODENAME -- python train.py": Skipped(
        "SLURM: srun, and a file system the nodes share"
    ),
    "ncclcheck logs /shared/runs/$SLURM_JOB_ID/*": Skipped("SLURM: a job's run dirs on the user's shared file system"),
    # watch, while the shared job runs: healthy, so 0, or 4 while --once is still pending at its end on a busy
    # machine; 2 only where other jobs run too (it must list this one). Never 1: that would blame a healthy job.
    "ncclcheck watch": Runs(frozenset({exits.OK, exits.USAGE, exits.UNDECIDED}), phase="during"),
    "ncclcheck watch --once --json": Runs(frozenset({exits.OK, exits.USAGE, exits.UNDECIDED}), phase="during"),
    # the README shows it on a hung job; here on the healthy shared one, which it must not blame
    "ncclcheck watch --once": Runs(frozenset({exits.OK, exits.USAGE, exits.UNDECIDED}), phase="during"),
    "ncclcheck watch --slurm 81234": Skipped("SLURM: a running job's id"),
    "ncclcheck watch --fanout 'pdsh -w gpu-[0401-0416]'": Skipped("a cluster: pdsh over ssh to gpu-0401..0416"),
    "ncclcheck watch --fanout 'for h in node0 node1; do ssh $h {} & done; wait' --once --json": Skipped(
        "a cluster: ssh to node0 and node1"
    ),
    "ncclcheck watch --fanout 'for p in $(kubectl get pods -l job=train -o name); do kubectl exec $p -- {} & done; "
    "wait'": Skipped("a Kubernetes cluster: kubectl exec into the job's pods"),
    "ncclcheck watch --agents lines.jsonl": Runs(frozenset({exits.OK}), phase="after"),
}


# --- reading the pages --------------------------------------------------------------------------------------------


def page_texts() -> dict[str, str]:
    """Each page a user reads, by its path in the repository."""
    return {str(page.relative_to(REPO)): page.read_text(encoding="utf-8") for page in PAGES}


def code_blocks(text: str) -> list[list[str]]:
    """The lines of each fenced block, in order."""
    blocks: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
            if inside:
                blocks.append([])
        elif inside:
            blocks[-1].append(line)
    return blocks


def command(line: str) -> str:
    """A block's line without its trailing ``# comment`` (a ``#`` after a space, outside any quotes)."""
    quote = ""
    for i, char in enumerate(line):
        if char in "'\"" and quote in ("", char):
            quote = "" if quote else char
        elif char == "#" and not quote and (i == 0 or line[i - 1] == " "):
            return line[:i].rstrip()
    return line.rstrip()


def command_lines(text: str) -> list[str]:
    """Every command line of every block that is not an output block; in a block with ``$ `` lines (a command and
    what it printed), only those lines, without the prompt."""
    found: list[str] = []
    for block in code_blocks(text):
        lines = [line for line in block if line.strip()]
        if any(line.startswith("$ ") for line in lines):
            found += [command(line[2:]) for line in lines if line.startswith("$ ")]
        elif lines and not any(lines[0].startswith(head) for head in OUTPUT_BLOCKS):
            found += [command(line) for line in lines]
    return found


def inline_commands(text: str) -> list[str]:
    """Inline code spans outside the blocks that call an ncclcheck command (``ncclcheck logs X``,
    ``python -m ncclcheck watch ...``); a span may wrap onto a second line."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    spans = [" ".join(s.replace("\\|", "|").split()) for s in re.findall(r"`([^`\n]+(?:\n[^`\n]+)?)`", prose)]
    return [s for s in spans if re.match(rf"^(\S+ ){{0,4}}ncclcheck ({'|'.join(COMMANDS)})\b", s)]


def ncclcheck_argvs(line: str) -> list[list[str]]:
    """Each ``ncclcheck`` invocation on a shell line, as its arguments: up to a pipe, ``&&`` or ``;``; usage
    notation (``[--severity error|warning|all]``, ``...``) read as its first choice."""
    argvs: list[list[str]] = []
    words = shlex.split(line.replace("[", "").replace("]", ""))
    for start, word in enumerate(words):
        if word != "ncclcheck":
            continue
        argv: list[str] = []
        for arg in words[start + 1 :]:
            if arg in ("|", "&&", ";", "&"):
                break
            if arg != "...":
                argv.append(arg.split("|")[0] if "|" in arg and not arg.startswith("-") else arg)
        argvs.append(argv)
    return argvs


def parse_error(argv: list[str]) -> str | None:
    """What ncclcheck's own parser says against ``argv`` (``None``: it parses), as ``cli.main`` parses; a flag must
    be written whole (argparse would take ``--np`` for ``--nproc``: a README must not teach the abbreviation)."""
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(chosen if chosen in COMMANDS else None)
    try:
        _, extra = parser.parse_known_args(argv)
    except exits.UsageError as error:
        return str(error)
    except SystemExit:  # --help or --version: they parse
        return None
    if extra:
        return f"unrecognized arguments: {' '.join(extra)}"
    flags = argv[: argv.index("--")] if "--" in argv else argv
    known = set(parser.format_help().split()) | set(command_help(parser, chosen).split())
    abbreviated = [flag.split("=")[0] for flag in flags if flag.startswith("--") and flag.split("=")[0] not in known]
    return f"not a flag's whole name: {abbreviated}" if abbreviated else None


def command_help(parser: argparse.ArgumentParser, chosen: str | None) -> str:
    """The chosen command's help, whose words hold every flag it has."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and chosen in action.choices:
            return action.choices[chosen].format_help()
    return ""


def pip_targets(line: str) -> list[str]:
    """The paths ``pip install`` is handed on an install line (options and packages by name left out)."""
    words = shlex.split(line)
    targets: list[str] = []
    for i, word in enumerate(words[:-1]):
        if word == "pip" and words[i + 1] == "install":
            for arg in words[i + 2 :]:
                if arg in ("&&", ";", "|"):
                    break
                if not arg.startswith("-") and ("/" in arg or arg.startswith(".")):
                    targets.append(arg)
    return targets


def installation_section(text: str) -> str:
    return text.split("## Installation", 1)[1].split("\n## ", 1)[0]


# --- the pure tier ------------------------------------------------------------------------------------------------


def test_every_command_line_a_page_shows_is_run_or_skipped_with_a_reason() -> None:
    pages = page_texts()
    assert "README.md" in pages and "docs/index.md" in pages and len(pages) > 5, sorted(pages)
    shown = {line: name for name, text in pages.items() for line in command_lines(text)}
    unclassified = {line: name for line, name in shown.items() if line not in PLANS}
    stale = [line for line in PLANS if line not in shown]
    assert not unclassified, f"command lines neither run nor skipped with a reason in PLANS: {unclassified}"
    assert not stale, f"PLANS classifies lines no page shows any more: {stale}"
    assert all(plan.reason.strip() for plan in PLANS.values() if isinstance(plan, Skipped))
    heads = [block[0] for text in pages.values() for block in code_blocks(text) if block]
    assert all(any(line.startswith(head) for line in heads) for head in OUTPUT_BLOCKS), "an output block is gone"


def test_every_example_the_readme_shows_with_its_output_is_run_and_said_again() -> None:
    """The README's ``$`` examples print what it shows: each is run here, and what it says is checked where the
    example's words do not depend on the machine."""
    examples = [
        line[2:] for block in code_blocks(README.read_text(encoding="utf-8")) for line in block if line[:2] == "$ "
    ]
    assert len(examples) >= 5, examples  # one per command
    assert all(isinstance(PLANS[command(line)], Runs) for line in examples), examples
    for line in examples:
        plan = PLANS[command(line)]
        assert isinstance(plan, Runs)
        assert all(said in README.read_text(encoding="utf-8") for said in plan.says), line


def test_must_fire_a_prompt_block_yields_its_commands_and_no_output() -> None:
    text = "```\n$ ncclcheck env --frobnicate\n✓ nothing on this node blocks NCCL\n$ make demo  # again\n```\n"
    assert command_lines(text) == ["ncclcheck env --frobnicate", "make demo"]


def test_must_not_output_lines_of_a_prompt_block_are_commands() -> None:
    text = "```\n$ ncclcheck logs x/\nerror peer-crashed [ranks 0-1]: a peer closed\n  fix: find the rank\n```\n"
    assert command_lines(text) == ["ncclcheck logs x/"]


def test_must_fire_a_new_command_line_or_an_unknown_block_is_unclassified() -> None:
    text = "```\nncclcheck env --frobnicate\n```\n\n```\nmake demo    # a comment\n```\n"
    assert command_lines(text) == ["ncclcheck env --frobnicate", "make demo"]
    assert "ncclcheck env --frobnicate" not in PLANS


def test_must_not_output_blocks_and_comments_are_not_commands() -> None:
    text = '```\n{"schema": "ncclcheck.run/1", "command": [...],\n "verdict": {}}\n```\n```\n! slow-rank: x\n```\n'
    assert command_lines(text) == []
    assert command("ncclcheck watch --fanout 'a # not a comment' --once   # a comment") == (
        "ncclcheck watch --fanout 'a # not a comment' --once"
    )


def test_every_given_value_replaces_text_its_line_has() -> None:
    for line, plan in PLANS.items():
        if isinstance(plan, Runs):
            assert all(text in line for text, _ in plan.given), line
    assert [line for line, plan in PLANS.items() if isinstance(plan, Runs) and plan.phase == "job"], "no shared job"


def test_every_ncclcheck_call_a_page_shows_parses_with_the_real_flags() -> None:
    """Code blocks (skipped lines too: a cluster's command must still name real flags) and inline code, on every
    page a user reads."""
    texts = page_texts().values()
    lines = [line for text in texts for line in command_lines(text) + inline_commands(text)]
    calls = [argv for line in lines for argv in ncclcheck_argvs(line)]
    calls = [argv for argv in calls if argv[1:]]  # prose names a command (`ncclcheck logs`) without calling it
    assert len(calls) > 30, calls  # the README's calls were found at all
    wrong = {" ".join(argv): error for argv in calls if (error := parse_error(argv))}
    assert not wrong, wrong


@pytest.mark.parametrize(
    "line",
    ["ncclcheck smoke --np 2 --backend gloo", "kubectl logs x | ncclcheck logs - --jsn", "ncclcheck watch --once 3"],
)
def test_must_fire_a_flag_ncclcheck_does_not_have(line: str) -> None:
    assert parse_error(ncclcheck_argvs(line)[0]) is not None


@pytest.mark.parametrize(
    "line",
    [
        "ncclcheck logs --events [--severity error|warning|all] PATH",
        "python -m ncclcheck watch --agent ...",
        "ncclcheck logs big/ | head",
        "srun -N2 --ntasks-per-node=1 ncclcheck smoke",
    ],
)
def test_must_not_usage_notation_and_shell_around_a_call_parse(line: str) -> None:
    argvs = ncclcheck_argvs(line)
    assert len(argvs) == 1 and parse_error(argvs[0]) is None, argvs


def test_every_path_the_install_recipe_hands_pip_holds_a_pyproject_from_the_checkout_root() -> None:
    section = installation_section(README.read_text(encoding="utf-8"))
    targets = [t for block in code_blocks(section) for line in block for t in pip_targets(command(line))]
    assert "." in targets and "dist/ncclcheck-*.whl" in targets, targets
    projects = [t for t in targets if not t.endswith(".whl")]
    assert all((REPO / t / "pyproject.toml").is_file() for t in projects), projects


def test_must_fire_the_old_recipe_handed_pip_the_package_folder() -> None:
    """``pip install ./ncclcheck`` run in the checkout points at the package, which has no pyproject.toml."""
    targets = pip_targets("pip install ./ncclcheck")
    assert targets == ["./ncclcheck"] and not (REPO / "ncclcheck" / "pyproject.toml").is_file()


SIGNALLED = (
    'Traceback (most recent call last):\n  File "/v/bin/torchrun", line 8, in <module>\n    sys.exit(main())\n'
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 25711 got signal: 15\n"
)


def test_must_not_torchruns_own_traceback_when_ncclcheck_ended_it_is_no_traceback_of_ncclcheck() -> None:
    assert tracebacks(f"ncclcheck run: hang ...\n{SIGNALLED}exit code 1\n", ends_launcher=True) == 0


@pytest.mark.parametrize(
    "output",
    [
        SIGNALLED,  # a line that does not end the launcher must not print even torchrun's
        SIGNALLED.replace("signal: 15", "signal: 9"),
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nKeyError: 1\n' + SIGNALLED,
    ],
)
def test_must_fire_any_other_traceback_counts(output: str) -> None:
    assert tracebacks(output, ends_launcher=output != SIGNALLED) >= 1


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_commands_help_exits_0(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``ncclcheck COMMAND --help``, as the README's install block says to run it."""
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    out = capsys.readouterr()
    assert done.value.code == exits.OK and out.out.startswith(f"usage: ncclcheck {name}") and not out.err


# --- the integration tier: the lines run ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    code: int | None  # None: it did not end within its time and was ended
    out: str
    err: str


@dataclass(frozen=True)
class Session:
    work: Path
    ran: dict[str, Ran]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def prepare(work: Path) -> dict[str, str]:
    """The working directory every line runs in, and its environment: the files the README's relative paths and
    placeholders name, each a real capture from tests/fixtures; a ``kubectl`` on PATH prints a recorded pod log
    for ``kubectl logs``."""
    shutil.copytree(FIXTURES / "torchrun" / "two_nodes", work / "job-1234", ignore=shutil.ignore_patterns("*.txt"))
    dumps = work / "home" / ".cache" / "torch"
    dumps.mkdir(parents=True)
    mismatch = FIXTURES / "control_plane" / "op_mismatch"  # one real job: each rank's Flight Recorder and stacks
    for rank in range(4):
        shutil.copy(mismatch / f"fr_rank{rank}.json", dumps / f"comm_lib_trace_rank_{rank}")
        shutil.copy(mismatch / f"stacks_rank{rank}.txt", work / f"rank{rank}.log")
    shutil.copy(REPO / "tests" / "workers" / "readme_train.py", work / "train.py")
    (work / "probes").symlink_to(REPO / "probes")
    (work / "tests").symlink_to(REPO / "tests")  # the README's examples name the checkout's fixtures and workers
    shims = work / "bin"
    shims.mkdir()
    kubectl = shims / "kubectl"
    kubectl.write_text(f"#!/bin/sh\nexec cat {FIXTURES / 'real_failures' / 'thread_died_rank1.log'}\n")
    kubectl.chmod(0o755)
    path = f"{shims}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "HOME": str(work / "home"), "PYTHONUNBUFFERED": "1"}


def start(line: str, plan: Runs, work: Path, env: dict[str, str], port: int) -> subprocess.Popen[str]:
    """The line in bash (pipefail: a stand-in that fails cannot hide behind ncclcheck's code), in its own session."""
    for text, value in plan.given:
        line = line.replace(text, value.format(work=work))
    extra = {name: value.format(port=port) for name, value in plan.env}
    return subprocess.Popen(
        ["bash", "-o", "pipefail", "-c", line],
        cwd=work,
        env={**env, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(process: subprocess.Popen[str], timeout: float) -> Ran:
    """Its output and code; past ``timeout`` it is ended as a user would (SIGTERM: run and smoke end their
    launcher and ranks), then killed."""
    try:
        out, err = process.communicate(timeout=timeout)
        return Ran(process.returncode, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
        return Ran(None, out, err)


def until(ready: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.25)
    return False


TRACEBACK = "Traceback (most recent call last)"
LAUNCHER_ENDED = re.compile(
    r"^Traceback \(most recent call last\):\n(?:[ \t].*\n)*"
    r"torch\.distributed\.elastic\.multiprocessing\.api\.SignalException: Process \d+ got signal: 15$",
    re.M,
)


def tracebacks(output: str, ends_launcher: bool) -> int:
    """How many tracebacks ``output`` holds; where ncclcheck ended the launcher, torchrun's own SignalException
    traceback (its frames, then that one line) is not counted."""
    return (LAUNCHER_ENDED.sub("", output) if ends_launcher else output).count(TRACEBACK)


def text_of(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def lines_of(phase: str) -> list[tuple[str, Runs]]:
    return [(line, plan) for line, plan in PLANS.items() if isinstance(plan, Runs) and plan.phase == phase]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    """Every runnable line, once, in order: the shared job, the lines while it runs, after it ended, the rest."""
    work = tmp_path_factory.mktemp("readme")
    env, port, ran = prepare(work), free_port(), {}
    ((job_line, job_plan),) = lines_of("job")
    job = start(job_line, job_plan, work, env, port)
    try:
        launcher_log = work / "runs" / "exp7" / "logs" / "launcher.log"
        if until(lambda: all(f"ready {r}" in text_of(launcher_log) for r in (0, 1)), 120):
            for line, plan in lines_of("during"):
                ran[line] = finish(start(line, plan, work, env, port), 120)
    finally:
        (work / "STOP").touch()
        ran[job_line] = finish(job, 90)
    (work / "runs" / "node0").symlink_to("exp7")
    if (work / "runs" / "exp7" / "watch-agent.jsonl").is_file():
        shutil.copy(work / "runs" / "exp7" / "watch-agent.jsonl", work / "lines.jsonl")
    # the rest do not depend on each other: three at a time (most of their time is waiting on a stall or a job)
    rest = lines_of("after") + lines_of("alone")
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = pool.map(lambda lp: finish(start(lp[0], lp[1], work, env, free_port()), 180), rest)
        ran.update(zip((line for line, _ in rest), done))
    return Session(work, ran)


@pytest.mark.integration
@pytest.mark.xdist_group("readme")
@pytest.mark.parametrize("line", [line for phase in PHASES for line, _ in lines_of(phase)])
def test_a_shown_line_runs_with_a_documented_exit_code_and_no_traceback(session: Session, line: str) -> None:
    plan = PLANS[line]
    assert isinstance(plan, Runs)
    assert line in session.ran, "not run: the shared job's ranks never printed their ready lines"
    done = session.ran[line]
    said = f"{line}\n--- exit code {done.code}\n--- stdout\n{done.out[-3000:]}\n--- stderr\n{done.err[-3000:]}"
    assert done.code in plan.codes, said
    assert tracebacks(done.out + done.err, plan.ends_launcher) == 0, said
    if done.code == exits.USAGE:  # watch where other jobs run too: several jobs, and this one must be listed
        assert str(session.work) in done.out + done.err, said
    if "--json" in line.split():
        assert json.loads(done.out)["schema"].startswith("ncclcheck."), said
    assert all(text in done.out + done.err for text in plan.says), said


@pytest.mark.integration
def test_the_install_recipe_from_a_fresh_clone_keeps_the_environments_torch(tmp_path: Path) -> None:
    """The README's pip lines, in a fresh clone's root, against an environment that already has the job's torch
    (a venv that sees this one's packages): pip would install ncclcheck and nothing else, never a torch. Only
    ``--dry-run``: nothing is installed on the machine running the tests."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout (an sdist): nothing to clone")
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(tmp_path / "clone")], check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True, timeout=120)
    torch_spec = importlib.util.find_spec("torch")
    assert torch_spec is not None and torch_spec.origin is not None
    site = next((tmp_path / "env" / "lib").glob("python3*/site-packages"))
    (site / "job_environment.pth").write_text(str(Path(torch_spec.origin).parents[1]) + "\n")
    lines = [line for line, plan in PLANS.items() if isinstance(plan, InClone)]
    assert lines
    for number, line in enumerate(lines):
        words = shlex.split(line)
        assert words[:2] == ["pip", "install"], line
        report = tmp_path / f"report{number}.json"
        pip = [sys.executable, "-m", "pip", "--python", str(tmp_path / "env" / "bin" / "python")]
        done = subprocess.run(
            [*pip, *words[1:], "--dry-run", "--quiet", "--report", str(report)],
            cwd=tmp_path / "clone",
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode and "No matching distribution found for hatchling" in done.stderr:
            pytest.skip("no package index reachable: pip cannot fetch the build backend (hatchling)")
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        names = [item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]]
        assert names == ["ncclcheck"], (line, names)
