"""``ncclcheck run``'s default run dir: two runs started in the same second in one directory never share one."""

from __future__ import annotations

import os
from pathlib import Path

from ncclcheck.commands.run.settings import fresh_dir


def test_a_second_run_in_the_same_second_gets_its_own_dir(tmp_path: Path) -> None:
    base = str(tmp_path / "ncclcheck-run-node7-20261127-060000")
    first, second, third = fresh_dir(base), fresh_dir(base), fresh_dir(base)
    assert (first, second, third) == (base, f"{base}-2", f"{base}-3")
    assert all(os.path.isdir(p) for p in (first, second, third))


def test_must_not_a_dir_that_cannot_be_made_is_left_for_the_run_to_report(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    base = str(tmp_path / "file" / "ncclcheck-run-x")  # under a file: no dir can be made there
    assert fresh_dir(base) == base and not os.path.exists(base)
