"""Pure analysis: frozen facts in, findings out. No I/O, no clock, no globals."""
