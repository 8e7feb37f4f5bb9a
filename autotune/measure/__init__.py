"""Measurement: the one place that times (a candidate and the AR baseline interleaved,
single prompts or batches), the paired speedup statistic, the hardware profile, and the
teacher-forced agreement proxy. Objectives and the search call it and never time."""
