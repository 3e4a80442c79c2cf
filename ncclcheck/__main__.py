"""``python -m ncclcheck``."""

from ncclcheck.cli import entry

entry()
