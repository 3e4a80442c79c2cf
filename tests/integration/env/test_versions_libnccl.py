"""The versions probe loads libnccl with ctypes and calls ncclGetVersion, in the loader's order.

A real GPU node has a real libnccl; here two tiny shared libraries that export ncclGetVersion
(compiled with the system C compiler) stand in, so the ctypes call, the version decoding and
the LD_PRELOAD > LD_LIBRARY_PATH ordering run for real. The last tests read the real libnccl from
NVIDIA's wheel (``tests/libnccl.py``; they skip when it cannot be had), whose ncclGetVersion runs without a GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from libnccl import VERSION, require_libnccl

from ncclcheck.analysis.nccl_rules import decode_version, version_text

pytestmark = pytest.mark.integration

SOURCE = "int ncclGetVersion(int* version) {{ *version = {code}; return 0; }}\n"


def build(tmp: Path, name: str, code: int) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build a stand-in libnccl")
    directory = tmp / name
    directory.mkdir()
    (directory / "nccl.c").write_text(SOURCE.format(code=code))
    lib = directory / "libnccl.so.2"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(directory / "nccl.c")], check=True)
    return lib


def probe(env: dict[str, str]) -> dict[str, object]:
    full = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    full.update(env)
    done = subprocess.run(
        [sys.executable, str(REPO / "probes" / "versions.py")],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
        check=True,
    )
    facts: dict[str, object] = json.loads(done.stdout)
    return facts


def test_loader_order_and_decoding(tmp_path: Path) -> None:
    old = build(tmp_path, "old", 21805)
    new = build(tmp_path, "new", 22105)
    facts = probe({"LD_LIBRARY_PATH": str(new.parent), "LD_PRELOAD": str(old)})
    libs = facts["nccl_libs"]
    assert isinstance(libs, list)
    assert [(lib["origin"], lib["version_code"]) for lib in libs][:2] == [
        ("LD_PRELOAD", 21805),
        ("LD_LIBRARY_PATH", 22105),
    ]


def env_versions(env: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``ncclcheck env --json`` run with ``env``: the report and its versions check."""
    done = subprocess.run(
        [sys.executable, "-m", "ncclcheck", "env", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    report: dict[str, Any] = json.loads(done.stdout)
    return report, next(c for c in report["checks"] if c["id"] == "versions")


def test_env_reports_the_preloaded_library(tmp_path: Path) -> None:
    lib = build(tmp_path, "only", 22304)
    report, versions = env_versions({**os.environ, "LD_LIBRARY_PATH": str(lib.parent)})
    assert "NCCL 2.23.4" in versions["summary"]
    assert report["nccl_rules"] == "2.23.4"
    assert any("libnccl 2.23.4 from LD_LIBRARY_PATH" in d for d in versions["details"])


def test_broken_library_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    bogus = tmp_path / "libnccl.so.2"
    bogus.write_text("not an ELF file")
    facts = probe({"LD_LIBRARY_PATH": str(tmp_path)})
    libs = facts["nccl_libs"]
    assert isinstance(libs, list) and libs[0]["version_code"] is None and libs[0]["error"]


def test_probe_reads_the_real_libnccl() -> None:
    lib = require_libnccl()
    for variable, value in (("LD_LIBRARY_PATH", str(lib.parent)), ("LD_PRELOAD", str(lib))):
        libs = probe({variable: value})["nccl_libs"]
        assert isinstance(libs, list)
        first = libs[0]
        assert (first["path"], first["origin"], first["error"]) == (str(lib), variable, None)
        assert version_text(decode_version(first["version_code"])) == VERSION


def test_env_reports_the_real_libnccl() -> None:
    lib = require_libnccl()
    full = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    full["LD_PRELOAD"] = str(lib)
    report, versions = env_versions(full)
    assert f"NCCL {VERSION}" in versions["summary"]
    assert report["nccl_rules"] == VERSION
    assert f"libnccl {VERSION} from LD_PRELOAD: {lib} (would load)" in versions["details"]
