"""NCCL RAS status replies in the byte layout of src/ras/client_support.cc, for the client's tests and the
judgement's."""

from __future__ import annotations

from collections.abc import Sequence

from ncclcheck.model.ras import OPS


def nccl_json(comms: Sequence[dict[str, object]], version: str = "2.28.7", comma: bool = True) -> str:
    """A status reply in the byte layout of client_support.cc's json* functions (``comma``: False as 2.28.9 printed)."""
    out = [
        "{\n",
        f'  "nccl_version": "{version}",\n',
        '  "cuda_runtime_version": 12080,\n',
        '  "cuda_driver_version": 12080,\n',
        '  "timestamp": "2026-11-20 10:02:11",\n',
        f'  "communicators_count": {len(comms)},\n',
        '  "communicators": [\n',
    ]
    for i, comm in enumerate(comms):
        ranks: list[dict[str, object]] = comm["ranks"]  # type: ignore[assignment]
        missing: list[dict[str, object]] = comm.get("missing", [])  # type: ignore[assignment]
        if i:
            out.append(",\n")
        out += [
            "    {\n",
            f'      "hash": "{comm["hash"]}",\n',
            '      "secondary_hash": "0x1d2c:0x4e5f",\n',
            f'      "size": {len(ranks) + len(missing)},\n',
            f'      "ranks_count": {len(ranks)},\n',
            f'      "missing_ranks_count": {len(missing)},\n',
            '      "ranks": [\n',
        ]
        for j, r in enumerate(ranks):
            counts: dict[str, int] = r["counts"]  # type: ignore[assignment]
            if j:
                out.append(",\n")
            out += [
                "        {\n",
                f'          "rank": {r["rank"]},\n',
                f'          "host": "{r["host"]}",\n',
                f'          "pid": {r["pid"]},\n',
                f'          "cuda_dev": {r["rank"]},\n',
                f'          "nvml_dev": {r["rank"]},\n',
                '          "status": {\n',
                f'            "init_state": {r.get("init", 0)},\n',
                f'            "async_error": {r.get("error", 0)},\n',
                '            "finalize_called": false,\n',
                '            "destroy_flag": false,\n',
                f'            "abort_flag": {"true" if r.get("abort") else "false"}\n',
                "          },\n",
                '          "collective_counts": {\n',
            ]
            out += [
                f'            "{op}": {counts.get(op, 0)}' + ("," if k < len(OPS) - 1 else "") + "\n"
                for k, op in enumerate(OPS)
            ]
            out += ["          }\n", "        }"]
        out += ["\n", "      ]" + ("," if comma else "") + "\n", '      "missing_ranks": [\n']
        for j, m in enumerate(missing):
            if j:
                out.append(",\n")
            out += [
                "        {\n",
                f'          "rank": {m["rank"]},\n',
                f'          "host": "{m["host"]}",\n',
                f'          "pid": {m["pid"]},\n',
                '          "cuda_dev": 0,\n',
                '          "nvml_dev": 0,\n',
                '          "status": {\n',
                '            "unresponsive": true,\n',
                f'            "considered_dead": {"true" if m.get("dead") else "false"}\n',
                "          }\n",
                "        }",
            ]
        out += ["\n      ]\n", "    }"]
    out += [
        "\n  ],\n",
        '  "ras": {\n',
        '    "collection_time_sec": 0.012,\n',
        '    "timeouts_count": 0\n',
        "  }\n",
        "}\n",
    ]
    return "".join(out)


def comm(counts: Sequence[int], pid0: int = 4000, op: str = "AllReduce", **extra: object) -> dict[str, object]:
    ranks = [
        {"rank": r, "host": f"node{r // 4}", "pid": pid0 + r, "counts": {op: n, "Broadcast": 3}}
        for r, n in enumerate(counts)
    ]
    return {"hash": "0x7f3ac1d2e4b5a697", "ranks": ranks, **extra}
