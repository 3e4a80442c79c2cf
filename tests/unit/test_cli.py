"""The command line as a user meets it, in this process: help and usage errors (real processes: tests/integration/cli)."""

from __future__ import annotations

import pytest
from conftest import REPO

from ncclcheck.cli import main


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
    """The README's install recipe names what it needs and where to run it; the FAQ (docs/faq.md) and the env figures
    it points to (docs/benchmarks.md) give env's real cost (a child's ``import torch.distributed``), not "well under a
    second, about 0.1x" of collect_env."""
    readme = (REPO / "README.md").read_text()
    env_figures = (REPO / "docs" / "benchmarks.md").read_text().split("## env", 1)[1].split("\n## ", 1)[0]
    faq = " ".join(((REPO / "docs" / "faq.md").read_text() + env_figures).split())
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
