"""One module per command: a docstring (its help), ``add_arguments(parser)`` and ``run(args) -> int``."""
