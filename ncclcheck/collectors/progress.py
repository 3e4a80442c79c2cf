"""Read the smoke ranks' progress files (JSON lines written by ncclcheck.smoke.worker)."""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from ncclcheck.model.smoke import Fingerprint, OpResult, RankProgress, Timing


def read_progress(log_dir: str) -> tuple[RankProgress, ...]:
    """Every rank file under ``log_dir/progress``; half-written last lines are ignored."""
    directory = os.path.join(log_dir, "progress")
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("rank") and n.endswith(".jsonl"))
    except OSError:
        return ()
    ranks = [_read_rank(os.path.join(directory, name)) for name in names]
    return tuple(sorted((r for r in ranks if r is not None), key=lambda r: r.rank))


def read_beats(log_dir: str) -> dict[int, float]:
    """rank -> time of its last finished iteration (the heartbeat between progress events)."""
    directory = os.path.join(log_dir, "progress")
    beats = {}
    try:
        names = [n for n in os.listdir(directory) if n.startswith("rank") and n.endswith(".beat")]
    except OSError:
        return {}
    for name in names:
        try:
            with open(os.path.join(directory, name), "rb") as handle:
                (beats[int(name[4:-5])],) = struct.unpack("<d", handle.read(8))
        except (OSError, ValueError, struct.error):
            continue
    return beats


def _events(path: str) -> list[dict[str, Any]]:
    events = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        return []
    return events


def _read_rank(path: str) -> RankProgress | None:
    events = _events(path)
    hello = next((e for e in events if e.get("ev") == "hello"), None)
    if hello is None:
        return None
    steps = [e for e in events if e.get("ev") in ("start", "done", "drill", "end")]
    last = steps[-1] if steps else hello
    results = tuple(
        OpResult(
            e["op"],
            int(e["bytes"]),
            int(e.get("count", 0)),
            "ok" if not e["wrong"] else "wrong",
            e["time_us_p50"],
            e["time_us_p95"],
            e["algbw_gbps"],
            e["busbw_gbps"],
            int(e["wrong"]),
            e.get("time_us_min"),
        )
        for e in events
        if e.get("ev") == "result"
    )
    timings = tuple(
        Timing(e["op"], int(e["bytes"]), int(e.get("count", 0)), tuple(e["times_us"]), int(e["wrong"]))
        for e in events
        if e.get("ev") == "done" and "times_us" in e
    )
    job: list[Any] = next((e["fingerprints"] for e in events if e.get("ev") == "fingerprints"), [])
    error = next((e for e in events if e.get("ev") == "error"), None)
    return RankProgress(
        rank=int(hello["rank"]),
        pid=hello.get("pid"),
        host=hello.get("host"),
        last_event=str(last.get("ev")),
        last_op=last.get("op"),
        last_bytes=int(last.get("bytes", 0)),
        last_call=last.get("call"),
        last_time=float(last.get("t", hello["t"])),
        ended=any(e.get("ev") == "end" for e in events),
        results=results,
        world_size=int(hello.get("world_size", 0)),
        local_rank=int(hello.get("local_rank", 0)),
        timings=timings,
        fingerprint=_fingerprint(hello.get("fingerprint")),
        job_fingerprints=tuple(f for f in map(_fingerprint, job) if f is not None),
        error=str(error.get("error", "")) if error else None,
        error_time=float(error.get("t", 0.0)) if error else None,
    )


def _fingerprint(data: Any) -> Fingerprint | None:
    try:
        return Fingerprint(
            rank=int(data["rank"]),
            host=str(data["host"]),
            torch=str(data["torch"]),
            nccl=data.get("nccl"),
            backend=str(data["backend"]),
            socket_ifname=data.get("socket_ifname"),
            ib_ports=tuple(data.get("ib_ports", ())),
            env=tuple((str(k), str(v)) for k, v in data.get("env", ())),
        )
    except (KeyError, TypeError, ValueError):
        return None
