"""The search pipeline, from a search's inputs to its run folder.

`plan.plan_search` checks a `SearchRequest` (the `search` flags, or a bench's keywords)
and resolves it into a `SearchPlan` before any model loads; `run.run_search` runs it:
`loading` (target, drafter, bound space, engine backend), the study with its replay
screen (`autotune.search`), the finalists on the held-out prompts, K per batch size,
then `record` (run.json), the run files, the report and the exports. It sits above
`autotune.runs` and `autotune.report` because it writes them; `autotune search` is
arguments -> plan -> run -> summary.
"""
