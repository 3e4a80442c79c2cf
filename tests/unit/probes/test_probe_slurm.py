"""probes/slurm.py: SLURM's KillWait from ``scontrol show config``, bounded, never an error.

The fixture is the real output of ``scontrol show config`` on the test cluster of tests/slurm_cluster.py (Debian's
slurm-wlm 22.05.8, KillWait left at its default 30 s). The pure tests put a fake ``scontrol`` first on PATH to stand
for one that is missing, fails, or does not answer (a wrong SLURM_CONF makes the real one wait on DNS for over 30 s).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXTURES
from slurm_cluster import fake_scontrol

from ncclcheck.collectors.env import collect_snapshot
from ncclcheck.model.env import EnvOptions
from ncclcheck.probes import save_tree, slurm, versions

FIXTURE = FIXTURES / "slurm" / "scontrol_show_config_22.05.txt"


def answers(outcome: BaseException | subprocess.CompletedProcess[str]) -> Callable[..., object]:
    """A stand-in for subprocess.run that raises ``outcome`` or returns it, and records what it was asked."""

    def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert list(args) == ["scontrol", "show", "config"] and kwargs["timeout"] == slurm.SCONTROL_TIMEOUT_S
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return run


def test_the_real_show_config_gives_kill_wait() -> None:
    facts = slurm.from_config("4242", FIXTURE.read_text())
    assert facts == slurm.SlurmFacts("4242", 30, "scontrol show config")


def test_a_changed_kill_wait_is_read_and_other_wait_lines_are_not() -> None:
    text = FIXTURE.read_text().replace("KillWait                = 30 sec", "KillWait                = 120 sec")
    assert "UnkillableStepTimeout" in text and "MessageTimeout" in text  # other "= N sec" lines stay there
    assert slurm.from_config("1", text).kill_wait_s == 120


def test_show_config_without_kill_wait_says_so() -> None:
    text = "\n".join(line for line in FIXTURE.read_text().splitlines() if not line.startswith("KillWait"))
    facts = slurm.from_config("1", text)
    assert facts.kill_wait_s is None and "no KillWait" in facts.source


def test_outside_slurm_nothing_is_run() -> None:
    assert slurm.collect({"PATH": "/usr/bin"}, run=answers(AssertionError("scontrol was run"))) is None


def test_the_collector_runs_scontrol_and_reads_its_output() -> None:
    done = subprocess.CompletedProcess(["scontrol"], 0, FIXTURE.read_text(), "")
    facts = slurm.collect({"SLURM_JOB_ID": "4242"}, run=answers(done))
    assert facts == slurm.SlurmFacts("4242", 30, "scontrol show config")


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        (FileNotFoundError(2, "No such file or directory", "scontrol"), "scontrol not found on PATH"),
        (PermissionError(13, "Permission denied"), "scontrol could not run: Permission denied"),
        (subprocess.TimeoutExpired(["scontrol"], 3.0), "did not answer within 3 s"),
        (
            subprocess.CompletedProcess(
                ["scontrol"],
                1,
                "",
                "scontrol: error: fetch_config: DNS SRV lookup failed\n"
                "scontrol: fatal: Could not establish a configuration source\n",
            ),
            "failed: scontrol: fatal: Could not establish a configuration source",
        ),
        (subprocess.CompletedProcess(["scontrol"], 1, "", ""), "failed: exit 1"),
    ],
)
def test_a_missing_failing_or_slow_scontrol_is_a_fact_not_an_error(
    outcome: BaseException | subprocess.CompletedProcess[str], said: str
) -> None:
    facts = slurm.collect({"SLURM_JOB_ID": "4242"}, run=answers(outcome))
    assert facts is not None and facts.kill_wait_s is None and said in facts.source, facts


def test_a_saved_tree_is_never_asked(tmp_path: Path) -> None:
    """--root: scontrol would answer for this cluster, not the saved node's; it is said, not run."""
    root = tmp_path / "tree"
    root.mkdir()
    saved_versions = dataclasses.asdict(
        versions.VersionFacts("3.11.7", "Linux", None, "no torch", None, (), None, None)
    )
    tree = {"schema": save_tree.TREE_SCHEMA, "environ": {"SLURM_JOB_ID": "77"}, "versions": saved_versions}
    (root / save_tree.TREE_FILE).write_text(json.dumps(tree))
    env = fake_scontrol(tmp_path, f"touch {tmp_path}/ran")
    snapshot = collect_snapshot(EnvOptions(root=str(root)), environ=env)
    assert snapshot.slurm is not None and snapshot.slurm.job_id == "77" and snapshot.slurm.kill_wait_s is None
    assert "saved tree" in snapshot.slurm.source and not (tmp_path / "ran").exists()
