"""smoke."""
