"""Objective presets (*.yaml), shipped as the package data `autotune.search.objective_presets`."""
