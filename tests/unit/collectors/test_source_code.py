"""The user's source at a frame's line, read with ast (``collectors.source_code``): pure, on a fixture file."""

from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES

from ncclcheck.collectors.source_code import code_at

SOURCE = FIXTURES / "source" / "waits_example.py"
LINES = SOURCE.read_text().splitlines()


def line(text: str) -> int:
    return next(i for i, x in enumerate(LINES, 1) if x.strip().startswith(text))


def test_a_with_line_enters_its_lock_and_the_functions_that_hold_it_are_named() -> None:
    code = code_at(str(SOURCE), line("with stats_lock:") + 0)
    assert code is not None and code.function == "flusher" and code.enters == ("stats_lock",)
    waiting = code_at(str(SOURCE), LINES.index("    with stats_lock:", line("def main") - 1) + 1)
    assert waiting is not None and waiting.function == "main" and waiting.enters == ("stats_lock",)
    assert dict(waiting.fillers)["stats_lock"] == ("flusher", "main")


def test_a_line_inside_a_with_block_holds_it_and_its_comment_is_left_out() -> None:
    code = code_at(str(SOURCE), line("time.sleep(3600)"))
    assert code is not None and code.holds == ("stats_lock",) and code.enters == ()
    assert code.text == "time.sleep(3600)" and code.calls == ("time.sleep",)


def test_waits_name_the_functions_that_fill_or_signal_them() -> None:
    event = code_at(str(SOURCE), line("loaded.wait()"))
    assert event is not None and event.fillers == (("loaded", ("loader",)),)
    got = code_at(str(SOURCE), line("t = batches.get()"))
    assert got is not None and got.text == "t = batches.get()"  # the comment is not code
    assert got.fillers == (("batches", ("Producer.run.<locals>.inner",)),)


def test_a_sleep_in_a_poll_loop_names_its_loop() -> None:
    code = code_at(str(SOURCE), line("time.sleep(0.5)"))
    assert code is not None and code.loop == 'while not os.path.exists("/tmp/go"):'


def test_must_not_a_with_of_a_call_is_no_lock_and_a_hash_in_a_string_stays() -> None:
    opened = code_at(str(SOURCE), line('with open("/tmp/x", "rb") as f:'))
    assert opened is not None and opened.enters == () and opened.calls == ("open",) and opened.fillers == ()
    text = code_at(str(SOURCE), line('text = "# not a comment"'))
    assert text is not None and text.text == 'text = "# not a comment"'
    sleep = code_at(str(SOURCE), line("time.sleep(1)"))
    assert sleep is not None and sleep.holds == () and sleep.loop is None and sleep.fillers == ()


def test_must_not_a_file_that_is_not_there_or_not_python_gives_no_facts(tmp_path: Path) -> None:
    assert code_at(str(tmp_path / "gone.py"), 3) is None
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n    pass\n")
    assert code_at(str(broken), 1) is None
    assert code_at(str(SOURCE), 10_000) is None


def test_a_line_s_facts_are_made_once_per_version_of_its_file(tmp_path: Path) -> None:
    """A stuck rank's line is asked at every sample of every rank (walking the whole tree again for it was most of
    an agent's own CPU): the same facts while the file is as it was; new ones once it changed."""
    code = tmp_path / "train.py"
    code.write_text("import time\n\ndef step():\n    time.sleep(1)\n")
    first = code_at(str(code), 4)
    assert first is not None and code_at(str(code), 4) is first
    code.write_text("import time\n\ndef step():\n    queue.get(timeout=None)\n")
    again = code_at(str(code), 4)
    assert again is not None and again is not first and "queue.get" in again.text
