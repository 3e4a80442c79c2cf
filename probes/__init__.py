"""Stdlib-only probes: each runs alone on a bare node (``python3 probes/NAME.py``) and prints JSON.

Inside the ncclcheck wheel they are the package ``ncclcheck.probes``.
"""
