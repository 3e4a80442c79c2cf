"""The command line as a user meets it, in real processes: the installed console script, ``--version``, the
modules each command imports in a fresh interpreter, and the probes run alone with the bare stdlib."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SCENARIOS, scenario

from ncclcheck import __version__
from ncclcheck.cli import main

NO_TORCH = (
    "import sys, runpy\n"
    "sys.argv = ['ncclcheck'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('ncclcheck', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'NO_TORCH')\n"
)


@pytest.mark.integration
@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["env", "--help"], ["env", "--json", "--root", "/"]])
def test_help_version_and_env_never_import_torch(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", NO_TORCH, *argv], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().endswith("NO_TORCH"), done.stdout + done.stderr


@pytest.mark.integration
def test_a_chosen_command_imports_no_other_command(tmp_path: Path) -> None:
    """``ncclcheck logs`` starts without importing env, smoke, watch and run (a third of a second); ``--help``
    still lists every command."""
    log = tmp_path / "a.log"
    log.write_text("step 1\n")
    script = NO_TORCH.replace(
        "'TORCH_IMPORTED' if 'torch' in sys.modules else 'NO_TORCH'",
        "sorted(m for m in sys.modules if m.startswith('ncclcheck.commands.'))",
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "logs", "--json", str(log)], capture_output=True, text=True, timeout=60
    )
    report, modules = done.stdout.rstrip().rsplit("\n", 1)  # the report, then the modules imported
    assert json.loads(report)["schema"].startswith("ncclcheck.logs/")
    assert modules == "['ncclcheck.commands.logs']", done.stdout + done.stderr
    listed = subprocess.run([sys.executable, "-m", "ncclcheck", "--help"], capture_output=True, text=True, timeout=60)
    assert all(f"    {name} " in listed.stdout for name in ("env", "smoke", "logs", "watch", "run")), listed.stdout


@pytest.mark.integration
def test_version() -> None:
    done = subprocess.run([sys.executable, "-m", "ncclcheck", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"ncclcheck {__version__}"


@pytest.mark.integration
def test_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("ncclcheck")
    done = subprocess.run([str(script), "env", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--master-addr" in done.stdout


@pytest.mark.integration
@pytest.mark.parametrize("probe", ["ib", "net", "host", "gpu", "versions", "envvars", "rdzv"])
def test_probes_run_alone_with_the_bare_stdlib(probe: str) -> None:
    """``python3 -S probes/NAME.py`` (no site-packages: stdlib only) prints JSON."""
    args = [sys.executable, "-S", str(REPO / "probes" / f"{probe}.py")]
    if probe not in ("versions", "rdzv"):
        args += ["--root", str(scenario(SCENARIOS[1]))]
    else:
        args += ["--master-addr", "127.0.0.1", "--master-port", "1"] if probe == "rdzv" else []
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert isinstance(json.loads(done.stdout), dict)


@pytest.mark.integration
def test_ib_probe_json_matches_fixture() -> None:
    done = subprocess.run(
        [sys.executable, "-S", str(REPO / "probes" / "ib.py"), "--root", str(scenario(SCENARIOS[0]))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    facts = json.loads(done.stdout)
    assert [h["name"] for h in facts["hcas"]] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert facts["peermem"] == ["sys/module/nvidia_peermem/version"]


@pytest.mark.integration
def test_net_probe_saves_ifaddrs_in_the_root_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "probes" / "net.py"), "--ifaddrs"], capture_output=True, text=True, timeout=60
    )
    rows = json.loads(done.stdout)
    assert any(r["name"] == "lo" and r["addr"] == "127.0.0.1" for r in rows)
    (tmp_path / "ifaddrs.json").write_text(done.stdout)
    (tmp_path / "sys").mkdir()
    code = main(["env", "--json", "--root", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)
    assert code == (1 if any(c["status"] == "fail" for c in report["checks"]) else 0)
    (interfaces,) = [c for c in report["checks"] if c["id"] == "net.interfaces"]
    assert "lo" in " ".join([interfaces["summary"], *interfaces["details"]])  # read from the saved ifaddrs.json
