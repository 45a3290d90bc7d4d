"""Overcomplete 2-D DCT dictionaries, the initialisation of DUST and UT on video (Luong et al. 2021)."""

from __future__ import annotations

import math

import torch


def dct_1d(size: int, atoms: int) -> torch.Tensor:
    """Overcomplete 1-D DCT-II frame: [size, atoms], unit-norm columns (atoms >= size)."""
    n = torch.arange(size, dtype=torch.float64)[:, None]
    k = torch.arange(atoms, dtype=torch.float64)[None, :]
    basis = torch.cos(math.pi * (n + 0.5) * k / atoms)
    basis[:, 1:] -= basis[:, 1:].mean(dim=0, keepdim=True)  # non-DC atoms zero-mean, as in Luong et al.
    return basis / basis.norm(dim=0, keepdim=True)


def dct_2d_dictionary(patch: int, atoms: int) -> torch.Tensor:
    """Separable overcomplete 2-D DCT: [patch*patch, atoms] with unit-norm columns.

    ``atoms`` >= patch*patch, so that the dictionary spans the patch's pixels (UT's encoder inverts D D^T; fewer
    atoms made it singular); it need not be a square (d = 2n = 512 for n = 256 is not): the 2-D frame takes
    k = ceil(sqrt(atoms)) per axis and keeps the ``atoms`` lowest-frequency products.
    """
    check_dct_size(patch, atoms)
    per_axis = math.ceil(math.sqrt(atoms))
    one_d = dct_1d(patch, per_axis)
    full = torch.kron(one_d, one_d)  # [patch*patch, per_axis**2], column (i, j) = outer product of atoms i, j
    i, j = torch.meshgrid(torch.arange(per_axis), torch.arange(per_axis), indexing="ij")
    order = torch.argsort((i + j).flatten() * per_axis * per_axis + (i * per_axis + j).flatten())
    chosen = full[:, order[:atoms]]
    return (chosen / chosen.norm(dim=0, keepdim=True)).to(torch.float32)


def check_dct_size(patch: int, atoms: int) -> None:
    """ValueError unless ``dct_2d_dictionary(patch, atoms)`` can be made (checked from a config before a run starts)."""
    if patch < 2:  # dct_1d's non-constant atoms are zero-mean: over one pixel, all 0, and their unit norm NaN
        raise ValueError(f"a DCT dictionary needs patches of at least 2x2 pixels, got {patch}x{patch}; "
                         "set data.patch=2 or more")
    if atoms < patch * patch:  # ceil(sqrt(atoms)) >= patch let 226 to 255 atoms through for 16x16 patches
        raise ValueError(f"a DCT dictionary needs at least {patch * patch} atoms for {patch}x{patch} patches, "
                         f"got {atoms}")
