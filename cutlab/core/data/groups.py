"""Which samples of a held-out split belong together, for a dataset whose samples are not independent."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SampleGroups:
    """``ids`` [N]: the group of each sample, in sample order; ``unit``: what one group is ("clip"), for the record.

    A dataset with this as its ``sample_groups`` attribute gets its verdict's sampling interval by resampling whole
    groups (cutlab.core.evaluation.violation_intervals)."""

    ids: torch.Tensor
    unit: str
