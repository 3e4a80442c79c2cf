"""Frozen data shared by collectors, analysis and views."""
