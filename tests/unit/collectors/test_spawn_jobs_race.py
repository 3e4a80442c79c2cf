"""A process of an mp.spawn job that ends between being listed and being read (collectors/spawn_jobs._job): the job is
still made from what was listed, never an exception (CI caught ``psutil.NoSuchProcess`` from it under load)."""

from __future__ import annotations

import psutil
import pytest

from ncclcheck.collectors import spawn_jobs

GONE_PID = 4_194_000  # above any pid this machine handed out (pid_max 4194304): no such process


class Gone:
    """A child psutil listed that has ended since: every read of it fails."""

    pid = GONE_PID

    def environ(self) -> dict[str, str]:
        raise psutil.NoSuchProcess(self.pid)


def test_a_rank_that_ended_since_it_was_listed_is_no_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spawn_jobs, "_index", lambda pid: 0)  # its spawn index, as py-spy read it before it ended
    job = spawn_jobs._job(1, [Gone()])  # type: ignore[list-item]
    assert job is not None and [r.pid for r in job.ranks] == [GONE_PID] and job.world_size == 1
