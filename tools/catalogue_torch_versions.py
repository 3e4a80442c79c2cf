"""Which torch releases print each torch message of the catalogue (ncclcheck/data/messages.tsv)?

How the catalogue's torch ``versions`` were found (2026-11): each release's manylinux wheel from PyPI (CUDA
builds: ProcessGroupNCCL lives in libtorch_cuda.so, absent from CPU wheels), the strings of its c10/c10d
libraries and the text of torch/distributed, searched for the literal pieces each message is built from in
torch's source (a message is often put together from several literals, so each piece is looked for on its
own). About 0.8 GB is downloaded per release and deleted once its strings are kept.

Usage: python tools/catalogue_torch_versions.py WORKDIR [VERSION ...]   (needs pip, unzip, strings)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

VERSIONS = (
    "2.2.0",
    "2.3.0",
    "2.4.0",
    "2.5.0",
    "2.6.0",
    "2.7.0",
    "2.8.0",
    "2.9.0",
    "2.10.0",
    "2.11.0",
    "2.12.0",
    "2.13.0",
    "2.14.0",
    "2.15.0",
)
MEMBERS = (
    "torch/lib/libtorch_cuda.so",
    "torch/lib/libtorch_cpu.so",
    "torch/lib/libc10_cuda.so",
    "torch/lib/libc10.so",
    "torch/distributed/*",
)
# catalogue id -> the literal pieces its message is built from, as torch's source writes them
PIECES: dict[str, tuple[str, ...]] = {
    "NCCLUtils error": ("NCCL error in: ",),
    "NCCLUtils error with version": ("NCCL error: ", ", NCCL version "),
    "watchdog timeout without Numel": (
        "Watchdog caught collective operation timeout: ",
        "SeqNum=",
        " milliseconds before timing out.",
    ),
    "watchdog timeout": ("Watchdog caught collective operation timeout: ", "NumelIn=", "NumelOut="),
    "timeout at NCCL work": ("Timeout at NCCL work: ", ", last enqueued NCCL work: "),
    "desync joined": ("joined but didn't finish collective #",),
    "desync finished": ("finished collective #", "but didn't join collective #"),
    "desync lagging": ("are the lagging ranks that caused this timeout",),
    "FR stack not found": ("Stack trace of the failed collective not found",),
    "FR stack": ("Stack trace of the failed collective: ",),
    "watchdog stuck": ("watchdog got stuck for ",),
    "watchdog exception": ("Exception (either an error or timeout) detected by watchdog at work: ",),
    "failure detected": ("failure detected by watchdog at work sequence id: ", "PG status: last enqueued work: "),
    "ncclUniqueId": ("is setting up NCCL communicator and retrieving ncclUniqueId from",),
    "listen failed": ("The server socket has failed to listen on any local network address", "useIpv6"),
    "client timed out": ("The client socket has timed out after",),
    "client failed": ("The client socket has failed to connect to any network address of",),
    "TCP client timed out": ("TCP client failed to connect/validate to host", "timed out (try="),
    "TCP client retrying": ("TCP client failed to connect/validate to host", "retrying (try="),
    "recvValue": ("recvValue failed on ",),
    "recvValueWithTimeout": ("recvValueWithTimeout failed on ",),
    "recv 0 bytes": ("Failed to recv, got 0 bytes. Connection was likely closed",),
    "mismatch": ("Detected mismatch between collectives on ranks",),
    "ddp": ("Expected to have finished reduction in the prior iteration before starting a new one",),
    "signal": ("got signal: ",),
    "OOM": ("CUDA out of memory. Tried to allocate ", " has a total capacity of "),
    "OOM old": ("CUDA out of memory. Tried to allocate ", " total capacity; "),
}


def strings_of(version: str, work: Path) -> str:
    """The kept strings of one release, fetched and extracted once."""
    kept = work / f"{version}.txt"
    if not kept.exists():
        wheel, tree = work / f"w{version}", work / f"x{version}"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--isolated",
                "--no-deps",
                f"torch=={version}",
                "--only-binary=:all:",
                "-d",
                str(wheel),
            ],
            check=True,
        )
        (whl,) = wheel.glob("*.whl")
        subprocess.run(["unzip", "-q", "-o", str(whl), *MEMBERS, "-d", str(tree)], check=False)
        parts = [
            subprocess.run(["strings", "-n", "6", str(so)], capture_output=True, text=True, check=True).stdout
            for so in sorted(tree.glob("torch/lib/*.so"))
        ]
        parts += [py.read_text(errors="replace") for py in sorted(tree.glob("torch/distributed/**/*.py"))]
        kept.write_text("\n".join(parts))
        shutil.rmtree(wheel)
        shutil.rmtree(tree)
    return kept.read_text(errors="replace")


def main() -> int:
    work = Path(sys.argv[1])
    work.mkdir(parents=True, exist_ok=True)
    versions = sys.argv[2:] or VERSIONS
    texts = {v: strings_of(v, work) for v in versions}
    for name, pieces in PIECES.items():
        found = [v.rsplit(".", 1)[0] for v, text in texts.items() if all(p in text for p in pieces)]
        print(f"{name:32} {', '.join(found) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
