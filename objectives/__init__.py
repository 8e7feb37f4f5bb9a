"""Objective presets (*.yaml), shipped as the package data `autotune.objective_presets`."""
