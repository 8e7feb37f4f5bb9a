"""Objective presets (*.yaml), shipped as the package data `autotune.records.objective_presets`."""
