"""The ``ncclcheck`` command line: ``main(argv) -> exit code``; commands live in ncclcheck/commands/."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from ncclcheck import __version__, exits
from ncclcheck.exits import UsageError
from ncclcheck.signals import Ended

DESCRIPTION = "A doctor for PyTorch distributed jobs that hang or fail in NCCL or gloo."
# Command name -> module in ncclcheck.commands; imported only when chosen, so --help stays fast.
COMMANDS = {"env": "env", "smoke": "smoke", "logs": "logs", "watch": "watch", "run": "run"}


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line and exit 2, never a traceback or a usage dump."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser(chosen: str | None = None) -> Parser:
    """The parser; with a command ``chosen``, only that command's module is imported (the others are named, with
    no help: none is shown when a command is given), so that ``ncclcheck logs`` starts as fast as it can."""
    parser = Parser(prog="ncclcheck", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"ncclcheck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, module_name in COMMANDS.items():
        if chosen is not None and name != chosen:
            sub.add_parser(name)
            continue
        module = importlib.import_module(f"ncclcheck.commands.{module_name}")
        doc = (module.__doc__ or "").strip()
        command = sub.add_parser(
            name, help=doc.splitlines()[0], description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ncclcheck with ``argv``; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        chosen = next((a for a in args_list if not a.startswith("-")), None)
        parser = build_parser(chosen if chosen in COMMANDS else None)
        args, extra = parser.parse_known_args(args_list)
        if extra:
            prog = f"ncclcheck {args.command}" if args.command else "ncclcheck"
            raise UsageError(f"{prog}: unrecognized arguments: {' '.join(extra)} (see {prog} --help)")
        if not args.command:
            parser.print_help()
            return exits.USAGE
        module = importlib.import_module(f"ncclcheck.commands.{COMMANDS[args.command]}")
        code: int = module.run(args)
        return code
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return exits.USAGE
    except KeyboardInterrupt:
        print("ncclcheck: interrupted", file=sys.stderr)
        return exits.INTERRUPTED
    except Ended as stop:  # SIGTERM or SIGHUP reached a command that had nothing left to end
        print(f"ncclcheck: ended by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return exits.by_signal(stop.signum)
    except BrokenPipeError:  # `ncclcheck logs big/ | head`: the reader left; say nothing more, as `cat` would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exits.PIPE


def entry() -> NoReturn:
    sys.exit(main())
