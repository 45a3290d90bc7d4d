"""Running many runs: the plan (dry run) and its cost, the launchers (in-process, local processes, SLURM).

A plain single run uses only ``plan.parse_command`` (its preemption signals are cutlab.run.preemption): submitit
and Hydra's sweep machinery load only when a multirun or a plan asks for them.
"""
