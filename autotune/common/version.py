"""autotune's version (pyproject.toml's), written into every run record and best.json.

Here, not only in the package root, so that a module of a lower layer reads it without
importing the root (which registers the built-in methods, a layer above it)."""

__version__ = "0.1.0"
