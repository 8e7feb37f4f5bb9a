"""The search's stages: objectives, samplers and storage, the replay screen, the measured
Optuna study, the finalists judged on held-out prompts, the batch-size schedule
(`autotune.pipeline` runs them in order)."""
