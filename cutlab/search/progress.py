"""What the submitting command says while a study's SLURM workers run: their lines go to SLURM's log files."""

from __future__ import annotations

import time

from cutlab.core.progress import tally
from cutlab.search.worker import finished


def trial_progress(plan, studies: dict):
    """A callback that prints each study's trials done out of its total, with the time left, when the count moves
    (read from the storage at most once a heartbeat interval, 10 s by default): the workers' own lines go to SLURM's
    log files, not this terminal."""
    meters = {name: tally(study.study_name, plan.preset.n_trials, "trial", finished(study), prefix="[cutlab-search] ")
              for name, study in studies.items()}
    last = [time.monotonic()]

    def poll() -> None:
        if time.monotonic() - last[0] < plan.preset.heartbeat["interval_s"]:
            return
        last[0] = time.monotonic()
        for name, study in studies.items():
            count = finished(study)
            if count != meters[name].done:
                meters[name].update(count, "from the study's storage")

    return poll
