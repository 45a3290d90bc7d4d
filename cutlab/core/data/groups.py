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


def joined_groups(parts: list) -> SampleGroups | None:
    """The groups of datasets joined end to end (cutlab-eval's ``--split all``), each part's ids shifted past those of
    the parts before it (their clips are other clips); None when a part's samples are independent (no groups)."""
    groups = [getattr(part, "sample_groups", None) for part in parts]
    if any(group is None for group in groups) or len({group.unit for group in groups}) != 1:
        return None
    shifted, offset = [], 0
    for group in groups:
        shifted.append(group.ids + offset)
        offset += int(group.ids.max()) + 1 if len(group.ids) else 0
    return SampleGroups(torch.cat(shifted), groups[0].unit)
