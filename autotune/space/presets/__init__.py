"""Search spaces as YAML data, shipped as package data (read by autotune.space)."""
