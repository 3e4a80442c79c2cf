"""Where a rank is, in the user's own code: the innermost frame that is not torch's or the standard library's,
its function and its line from that one frame."""

from __future__ import annotations

from watch_states import sample

from ncclcheck.analysis.stacks import call_site
from ncclcheck.analysis.watch.track import doing
from ncclcheck.model.stacks import Frame

QUEUE_GET = (
    Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 327),
    Frame("Queue.get", "/usr/lib/python3.11/queue.py", 171),
    Frame("next_batch", "/job/train.py", 42),
    Frame("<module>", "/job/train.py", 90),
)


def test_a_rank_blocked_in_queue_get_is_shown_at_the_users_line_with_the_users_function() -> None:
    assert call_site(QUEUE_GET) == "/job/train.py:42 (next_batch)"
    assert doing(sample(0, QUEUE_GET)) == (None, "/job/train.py:42 (next_batch)", "next_batch")


def test_conda_and_venv_standard_libraries_are_skipped_but_installed_packages_are_not() -> None:
    conda = (
        Frame("Condition.wait", "/opt/conda/lib/python3.12/threading.py", 327),
        Frame("Queue.get", "/opt/conda/lib/python3.12/queue.py", 171),
        Frame("fetch", "/opt/conda/lib/python3.12/site-packages/mylib/loader.py", 7),
    )
    assert call_site(conda) == "/opt/conda/lib/python3.12/site-packages/mylib/loader.py:7 (fetch)"
    frozen = (Frame("_find_and_load", "<frozen importlib._bootstrap>", 1), Frame("main", "/job/x.py", 3))
    assert call_site(frozen) == "/job/x.py:3 (main)"


def test_only_library_frames_give_no_call_site_and_the_innermost_function_as_label() -> None:
    frames = QUEUE_GET[:2]
    assert call_site(frames) is None
    assert doing(sample(0, frames))[2] == "Condition.wait"
