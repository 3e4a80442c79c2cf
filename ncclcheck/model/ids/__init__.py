"""The finding ids of each command, one catalogue per command (and one for the shared Flight Recorder analysis).

An id is on the wire (every ``--json`` carries it), so its string never changes; the code builds and compares
findings through these constants, never through a literal, and tests/unit/model/test_finding_ids.py holds every comparison to
an id that some rule or builder can produce. ``logs``' ids live in its rule tables (analysis/logs/rules.py and the
modules it gathers, data/messages.tsv): its catalogue names only the ids that code builds or compares outside them.
The catalogues sit in the model because the model and the views compare ids too (``Finding.blamed``, the slow-rank
panel), and they stand below analysis.
"""
