"""Helpers shared by the model-checking tests (stateful machine, explorer, coverage, mutants)."""
