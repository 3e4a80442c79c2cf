"""Rank 0's report when the smoke ranks ran under the user's own torchrun (no ncclcheck launcher watches them)."""

from __future__ import annotations

import os

from ncclcheck import exits
from ncclcheck.analysis.smoke.progress import job_results
from ncclcheck.analysis.smoke.summary import summarise
from ncclcheck.collectors.progress import read_progress
from ncclcheck.model.smoke import Launch
from ncclcheck.report_files import replace_json
from ncclcheck.views.console import make_console
from ncclcheck.views.smoke import render, to_json


def rank_report(log_dir: str, backend: str) -> int:
    """Render the job's results and write ``report.json`` beside the progress files; 0 pass, 1 fail."""
    ranks = read_progress(log_dir)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    launch = Launch(local, max(world // local, 1), 0, None, None, backend, log_dir, ())
    summary = summarise(launch, ranks, job_results(ranks), None, (), all(r.ended for r in ranks))
    render(summary, make_console())
    replace_json(os.path.join(log_dir, "report.json"), to_json(summary))
    return exits.smoke(summary.verdict, launch_failed=False)  # the user's own torchrun started these ranks
