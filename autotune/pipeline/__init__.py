"""The search pipeline, from a search's inputs to its run folder.

`plan.plan_search` checks a `SearchRequest` (the `search` flags, or a bench's keywords)
and resolves it into a `SearchPlan` before any model loads; `run.run_search` runs it:
`loading` (target, drafter, bound space, engine backend), then its table of stages
(`stages`): the replay `screen`, the study (`autotune.search`), the finalists on the
held-out prompts (`validation`, `races_in_engines`), K per batch size, then `record`
(run.json), the run files, the report and the exports (`outputs`). It sits above
`autotune.runs` and `autotune.report` because it writes them; `autotune search` is
arguments -> plan -> run -> summary.
"""
