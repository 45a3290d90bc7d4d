"""Running many runs: the plan (dry run), the launchers (in-process, local processes, SLURM) and preemption.

Nothing here is imported by a plain single run except ``preemption`` (signals -> checkpoint): submitit
and Hydra's sweep machinery load only when a multirun or a plan asks for them.
"""
