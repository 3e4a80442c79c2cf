"""The command line as a user meets it: help, version, usage errors, probes run alone."""

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


def test_env_help_says_torch_is_imported_in_a_child_not_never(capsys: pytest.CaptureFixture[str]) -> None:
    """env runs ``import torch.distributed`` in a child to catch a broken install: its help must not say it never
    imports torch, and must say where the import happens (the newcomer's issue 24, point 6)."""
    with pytest.raises(SystemExit) as done:
        main(["env", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert done.value.code == 0
    assert "never imports torch" not in text
    assert "a child Python runs `import torch.distributed`" in text and "own process" in text


def test_readme_install_and_faq_say_what_holds() -> None:
    """The README's install recipe names what it needs and where to run it; its FAQ gives env's real cost (a child's
    ``import torch.distributed``), not "well under a second, about 0.1x" of collect_env."""
    readme = (REPO / "README.md").read_text()
    faq = " ".join(readme.split("## FAQ", 1)[1].split())
    assert "<this repository>" not in readme and "from a checkout of this repository" in readme
    assert "pip install build && python -m build --wheel" in readme
    assert "Well under a second" not in faq and "about 0.1x" not in faq
    assert "`import torch.distributed` in a child Python" in faq
    assert "a bare `import torch.distributed`" in faq and "2-core" in faq


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["env", "--nproc", "0"], "expected a positive integer, got '0'"),
        (["env", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["env", "--root", "/no/such/dir"], "--root /no/such/dir is not a directory"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


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
