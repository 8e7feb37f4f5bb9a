"""Workloads: the prompts a search runs on (built-in set, Spec-Bench JSONL, JSONL, text)
and their split into search and held-out validation prompts."""
