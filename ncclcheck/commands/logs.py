"""Diagnose NCCL, torch, gloo and torchrun logs you already have: the root cause, where, and the fix.

Reads files, directories (walked), .gz files and - (stdin), streamed line by line, and Flight
Recorder dumps (pickle or JSON, one per rank). The first real error is told apart from its echoes
on other ranks; the dumps say which rank called what, where the ranks diverged. A line that says
it is an error while no rule explains it is reported as unrecognised, never passed over; inputs that hold
nothing (an empty file or stdin, only whitespace) are named, and nothing read is no verdict. Exit code:
0 no error found, 1 errors found, 2 usage error (e.g. a path that does not exist), 4 no known error
but an error line nothing explains, or nothing to judge (verdict "unknown"), 130 ^C, 128+N ended by
signal N, 141 the reader of the output left (`| head`). Large inputs are read on every core this
process may use (taskset limits it); the report is the same.

examples:
  ncclcheck logs job-1234/            # every rank's log, NCCL_DEBUG_FILE output, torchrun's log
  kubectl logs trainer-0 | ncclcheck logs - --json
  ncclcheck logs ~/.cache/torch/      # Flight Recorder dumps comm_lib_trace_rank_<N>
  ncclcheck logs runs/node*/          # `ncclcheck run` dirs of every node: one job verdict, hang records too
  ncclcheck logs --events --severity error x.log   # every line read as an error: emitter, rank
"""

from __future__ import annotations

import argparse
import gc
import json
import signal
import sys

from ncclcheck import exits
from ncclcheck.analysis.logs.verdict import with_hangs
from ncclcheck.collectors import hang_records
from ncclcheck.collectors.logfiles import InputError, LogSource, Reading, sources
from ncclcheck.exits import UsageError
from ncclcheck.signals import Ended, handling
from ncclcheck.sources.logs import diagnose, events, read_nothing
from ncclcheck.views.console import make_console
from ncclcheck.views.logs import render, to_json
from ncclcheck.views.logs_events import event_json, header_json, render_event


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="log files, directories, .gz files, Flight Recorder dumps, or - for stdin",
    )
    parser.add_argument("--json", action="store_true", help="print the ncclcheck.logs/2 JSON report")
    parser.add_argument(
        "--events",
        action="store_true",
        help="instead of the report, list each line as the reader read it (its emitter, severity, rank, host);"
        " with --json, JSON lines (ncclcheck.events/1)",
    )
    parser.add_argument(
        "--severity",
        choices=("error", "warning", "all"),
        default=None,
        help="with --events: the least severe events listed (default: warning)",
    )


def run(args: argparse.Namespace) -> int:
    if args.severity is not None and not args.events:
        raise UsageError(
            "ncclcheck logs: --severity lists events: give --events with it (the report lists every finding)"
        )
    reading = Reading()
    gc.freeze()  # what is loaded so far outlives the reading: no full collection walks it again while logs are read
    try:
        with handling():
            found = sources(args.paths, reading)
            if not found:
                notes = "".join(f"; {n}" for n in reading.notes)
                raise InputError(f"no log files under {', '.join(args.paths)}{notes}")
            if args.events:
                return _events(found, reading, args.severity or "warning", args.json)
            report = diagnose(found, reading)
    except InputError as exc:
        raise UsageError(f"ncclcheck logs: {exc} (give log files, directories, or - for stdin)") from None
    except Ended as stop:  # the workers reading big logs were ended on the way out
        print(f"ncclcheck logs: ended by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return exits.by_signal(stop.signum)
    finally:
        gc.unfreeze()
    report = with_hangs(report, hang_records.find(args.paths))  # run dirs: the hangs `ncclcheck run` saw live
    names = [s.name for s in found]
    if args.json:
        print(json.dumps(to_json(report, names), indent=1))
    else:
        render(report, names, make_console())
    sys.stdout.flush()  # a reader gone is said here (cli.main: exit 141), not at the interpreter's exit
    return exits.logs(report.status)


def _events(found: tuple[LogSource, ...], reading: Reading, least: str, as_json: bool) -> int:
    """``--events``: every line's event, streamed as it is read; 0 once listed (the verdict is the report's), 4
    when every input was empty (nothing listed is not "nothing wrong")."""
    names = [s.name for s in found]
    if as_json:
        print(json.dumps(header_json(names, least)))
        for event in events(found, reading, least):
            print(json.dumps(event_json(event)))
    else:
        console = make_console()
        for event in events(found, reading, least):
            render_event(event, console)
    sys.stdout.flush()
    for note in reading.notes:
        print(f"ncclcheck logs: {note}", file=sys.stderr)
    if read_nothing(found, reading):
        print("ncclcheck logs: nothing read: every input was empty (no verdict over nothing)", file=sys.stderr)
        return exits.UNDECIDED
    return exits.OK
