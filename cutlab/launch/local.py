"""Parallel local processes: each run its own ``python -m cutlab`` child, at most ``max_parallel`` at a time.

A thread pool of child processes (rather than submitit's local executor, which starts every job at
once): the cap matters on small machines, where more runs than cores slow every run (benchmarks/).
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor, as_completed

from cutlab.launch.job import RunCommand
from cutlab.launch.outcome import Outcome, outcome_of


def run_local(commands: list[RunCommand], max_parallel: int) -> list[Outcome]:
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=max(1, max_parallel)) as pool:
        futures = {pool.submit(command): command for command in commands}
        for future in as_completed(futures):
            command = futures[future]
            outcome = outcome_of(command.run_id, future.result, job_id=None)
            outcomes.append(outcome)
            print(f"[cutlab] local: {len(outcomes)}/{len(commands)} done; {outcome.line()}", file=sys.stderr, flush=True)
    return outcomes
