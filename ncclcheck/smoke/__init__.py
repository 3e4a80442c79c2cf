"""The smoke test's rank side: ``python -m ncclcheck.smoke`` runs as one rank inside torchrun."""
