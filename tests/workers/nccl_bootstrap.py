"""Ask the real NCCL which interface it bootstraps on: ``python nccl_bootstrap.py /path/to/libnccl.so.2``.

``ncclGetUniqueId`` runs NCCL's bootstrap network init (no GPU needed), which picks the interface from
NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY and the host's interfaces, and logs at INFO
``Bootstrap: Using IFNAME:ADDR<PORT>``. Prints one JSON object: ``rc`` (the ncclResult_t), ``interface`` and
``addr`` (None when NCCL picked none), ``last_error`` (``ncclGetLastError``) and NCCL's ``log``. Stdlib only.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import tempfile

USING = re.compile(r"NCCL INFO Bootstrap ?: Using (?P<name>[^:\s]+):(?P<addr>\S+?)<(?P<port>\d+)>\s*$", re.M)


def main(lib_path: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        log_file = os.path.join(tmp, "nccl.log")
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ["NCCL_DEBUG_FILE"] = log_file  # NCCL reads both when it first runs, below
        lib = ctypes.CDLL(lib_path)
        lib.ncclGetLastError.restype = ctypes.c_char_p
        lib.ncclGetLastError.argtypes = [ctypes.c_void_p]
        unique_id = ctypes.create_string_buffer(128)  # ncclUniqueId: char internal[128]
        rc = lib.ncclGetUniqueId(unique_id)
        last_error = (lib.ncclGetLastError(None) or b"").decode(errors="replace")
        with open(log_file, encoding="utf-8", errors="replace") as handle:
            log = handle.read()
    used = USING.findall(log)
    if len(used) > 1:
        raise SystemExit(f"NCCL logged several bootstrap interfaces: {used}")
    name, addr, _ = used[0] if used else (None, None, None)
    print(json.dumps({"rc": rc, "interface": name, "addr": addr, "last_error": last_error, "log": log}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
