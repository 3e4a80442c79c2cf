"""Read Flight Recorder dumps (pickle or JSON, one per rank) into ``FrDump``; never execute what a pickle names.

Dumps are written to ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` (older torch: ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``),
by default ``~/.cache/torch/comm_lib_trace_rank_<rank>``. The rank is only in the file name.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
from collections.abc import Mapping
from typing import Any

from ncclcheck.model.flight import FrDump, FrEntry, PgProgress, Unreadable

RANK_IN_NAME = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
MAX_DUMP_BYTES = 1 << 30
# torch's own frames, and ncclcheck run's hook around the point-to-point calls (control/hook/ncclcheck_hook_p2p.py)
TORCH_FRAME = re.compile(
    r"[/\\]torch[/\\](?:distributed|nn[/\\]parallel|_dynamo|utils[/\\]_contextlib)|[/\\]ncclcheck_hook_p2p\.py$"
)


class _NoClasses(pickle.Unpickler):
    """A dump holds only dicts, lists, tuples, strings and numbers; refusing every class keeps a hostile pickle inert."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing {module}.{name}: a Flight Recorder dump holds no objects")


def sniff(path: str) -> bool:
    """Whether a file looks like a Flight Recorder dump (a pickle, or JSON with FR's top-level keys)."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return True
    return head.lstrip()[:1] == b"{" and any(k in head for k in (b'"comm_lib_version"', b'"pg_config"', b'"entries"'))


def load(path: str) -> FrDump | Unreadable:
    """One dump, or why it cannot be used (truncated, not FR, no rank in its name)."""
    found = RANK_IN_NAME.search(os.path.basename(path))
    if not found:
        return Unreadable(path, "no rank number at the end of the file name (torch writes <prefix><rank>)")
    rank = int(found.group(1))
    try:
        if os.path.getsize(path) > MAX_DUMP_BYTES:
            return Unreadable(path, "larger than 1 GiB; not a Flight Recorder dump", rank)
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        return Unreadable(path, f"cannot be read ({type(exc).__name__}: {str(exc)[:120]}); truncated or corrupt", rank)
    return parse(path, rank, raw)


def parse(path: str, rank: int, raw: bytes) -> FrDump | Unreadable:
    """One dump's bytes (pickle or JSON, as a file holds them or a rank's control plane answers them)."""
    try:
        data = _NoClasses(io.BytesIO(raw)).load() if raw[:1] == b"\x80" else json.loads(raw)
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError) as exc:
        return Unreadable(path, f"cannot be read ({type(exc).__name__}: {str(exc)[:120]}); truncated or corrupt", rank)
    if not isinstance(data, Mapping) or not isinstance(data.get("entries", []), list):
        return Unreadable(path, "not a Flight Recorder dump (no entries)", rank)
    try:
        return _dump(path, rank, data)
    except (TypeError, ValueError, AttributeError) as exc:
        return Unreadable(path, f"unexpected layout ({type(exc).__name__}: {str(exc)[:120]})", rank)


def _dump(path: str, rank: int, data: Mapping[str, Any]) -> FrDump:
    entries = tuple(_entry(e) for e in data.get("entries") or () if isinstance(e, Mapping))
    return FrDump(path, rank, str(data.get("version", "")), pg_ranks(data.get("pg_config")), _progress(data), entries)


def pg_ranks(config: object) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(group name or description, its members' global ranks) from a ``pg_config`` mapping."""
    if not isinstance(config, Mapping):
        return ()
    out = []
    for name, group in config.items():
        ranks = group.get("ranks") if isinstance(group, Mapping) else None
        members = json.loads(ranks) if isinstance(ranks, str) else ranks
        if isinstance(members, list) and members:
            out.append((str(name), tuple(int(r) for r in members)))
            if isinstance(group, Mapping) and group.get("desc"):
                out.append((str(group["desc"]), tuple(int(r) for r in members)))
    return tuple(out)


def _progress(data: Mapping[str, Any]) -> tuple[PgProgress, ...]:
    """pg_status is keyed by the rank's local group id (``pg_id``), which differs from the group's name on ranks
    that are not in every group (the second group a rank joins is its "1" even when its name is "2"): the entries,
    which carry both, map one to the other; a key no entry names is taken as the name."""
    status = data.get("pg_status")
    if not isinstance(status, Mapping):
        return ()
    names: dict[str, str] = {}
    for e in data.get("entries") or ():
        pg = e.get("process_group") if isinstance(e, Mapping) else None
        if isinstance(pg, (list, tuple)) and pg and "pg_id" in e:
            names.setdefault(str(e["pg_id"]), str(pg[0]))
    return tuple(
        PgProgress(
            names.get(str(pg), str(pg)),
            int(s.get("last_enqueued_collective", -1)),
            int(s.get("last_started_collective", -1)),
            int(s.get("last_completed_collective", -1)),
        )
        for pg, s in status.items()
        if isinstance(s, Mapping)
    )


def _entry(e: Mapping[str, Any]) -> FrEntry:
    name = str(e.get("profiling_name", ""))
    lib, _, rest = name.partition(":") if ":" in name else ("", "", name)
    op, _, peer = rest.partition(" ")
    pg = e.get("process_group") or (str(e.get("pg_id", "")), "")
    retired, state = bool(e.get("retired")), str(e.get("state", ""))
    if lib == "gloo" and state == "scheduled" and retired:
        state = "completed"  # gloo never moves `state`; `retired` is the only sign an op finished
    return FrEntry(
        int(e.get("record_id", -1)),
        str(pg[0]),
        str(pg[1]) if len(pg) > 1 else "",
        int(e.get("collective_seq_id", -1)),
        int(e.get("p2p_seq_id", -1)),
        bool(e.get("is_p2p")),
        lib,
        op,
        peer,
        _sizes(e.get("input_sizes")),
        _sizes(e.get("output_sizes")),
        tuple(map(str, e.get("input_dtypes") or ())),
        tuple(map(str, e.get("output_dtypes") or ())),
        state,
        _call_site(e.get("frames")),
        bool(e["retired"]) if "retired" in e else None,
    )


def _sizes(value: object) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list):
        return ()
    return tuple(tuple(int(d) for d in s) for s in value if isinstance(s, list))


def _call_site(frames: object) -> str:
    """The innermost frame outside torch: the user's line that issued the op."""
    for frame in frames if isinstance(frames, list) else ():
        if isinstance(frame, Mapping) and not TORCH_FRAME.search(str(frame.get("filename", ""))):
            return f"{os.path.basename(str(frame.get('filename')))}:{frame.get('line')} {frame.get('name')}"
    return ""
