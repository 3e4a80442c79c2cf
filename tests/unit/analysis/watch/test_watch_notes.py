"""The notes the live view shows whatever its verdict: each where it must show, and nowhere else."""

from __future__ import annotations

from ncclcheck.analysis.watch.notes import (
    GUESSED_NOTE,
    NODES_NOTE,
    PTRACE_FIX,
    PY_SPY_MISSING,
    SOCKETS_NOTE,
    ptrace_denied,
    watch_notes,
)

# py-spy's own words on a process it may not read (py-spy 0.4, yama ptrace_scope=1 / no CAP_SYS_PTRACE)
PY_SPY_EPERM = "Error: Failed to open process - check if it is running.\nReason: Operation not permitted (os error 1)"
PY_SPY_GONE = "Error: Failed to find python version from target process"


def test_everything_readable_has_no_note() -> None:
    assert watch_notes(True, True, (), True, "torchrun") == ()
    assert watch_notes(False, False, (), True, "torchrun") == ()  # --no-stacks: py-spy is not wanted


def test_py_spy_missing_is_said_when_stacks_are_wanted() -> None:
    assert watch_notes(True, False, (), True, "torchrun") == (PY_SPY_MISSING,)


def test_ptrace_denied_is_told_from_py_spy_words_not_from_any_error() -> None:
    assert ptrace_denied(PY_SPY_EPERM) and ptrace_denied("Permission denied (os error 13)")
    assert not ptrace_denied(PY_SPY_GONE)
    assert watch_notes(True, True, (PY_SPY_GONE, PY_SPY_EPERM), True, "torchrun") == (PTRACE_FIX,)
    assert watch_notes(True, True, (PY_SPY_GONE,), True, "torchrun") == ()


def test_sockets_spawn_and_restart_notes() -> None:
    assert watch_notes(True, True, (), False, "torchrun") == (SOCKETS_NOTE,)
    assert watch_notes(True, True, (), True, "spawn-guessed") == (GUESSED_NOTE,)
    assert watch_notes(True, True, (), True, "spawn-nodes") == (NODES_NOTE,)
    assert watch_notes(True, True, (), True, "spawn") == ()
    restarted = watch_notes(True, True, (), True, "torchrun", ("10:04:05", (41, 42)))
    assert restarted == ("the ranks restarted at 10:04:05 (new pids 41, 42)",)
