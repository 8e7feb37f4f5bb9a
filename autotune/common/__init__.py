"""Torch-free helpers every layer may use: the one user-facing exception, atomic file
writes, YAML with line numbers and "did you mean"."""
