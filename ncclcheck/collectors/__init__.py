"""Collectors: the only code that touches the outside world; each returns frozen facts."""
