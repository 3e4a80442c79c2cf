"""The Flight Recorder analysis, shared: ``logs`` reads dumps, ``watch`` and ``run`` ask live ranks, all judge here."""
