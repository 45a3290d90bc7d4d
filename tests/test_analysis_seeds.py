"""Seeds in the report: a run repeated with the same seed (the same sweep run on two machines, or copied into
two folders) is one seed's sample, never two seeds' (Figs 5, 14, 15 error bars)."""

from __future__ import annotations

from helpers.analysis import write_run


def test_an_ablation_counts_a_seed_run_twice_as_one_seed(tmp_path):
    # Figs 5, 14, 15: the same alpha sweep (seeds 0, 1) in two folders, as from two machines, was drawn with
    # "4 seeds per point" and error bars over [a, a, b, b] (std |a - b|/sqrt 3, not |a - b|/sqrt 2)
    from analysis.collect import collect_runs
    from analysis.figures_metric import alpha_ablation

    cell = dict(model="dust", dataset="synthetic", L=3, gamma=0.09, constrained=True)
    for folder in ("once", "twice/a", "twice/b"):
        for alpha in (0.1, 0.3):
            for seed in (0, 1):
                write_run(tmp_path / folder, f"a{alpha}_s{seed}", **cell, alpha=alpha, seed=seed,
                          test=12.0 - 4 * alpha + seed, selection=12.0)
    once = alpha_ablation(collect_runs(tmp_path / "once"), tmp_path / "out_once")
    twice = alpha_ablation(collect_runs(tmp_path / "twice"), tmp_path / "out_twice")
    assert "(2 seeds per point)" in once.caption and "(2 seeds per point)" in twice.caption, twice.caption
    assert "4 runs repeat the seed" in twice.caption and "repeat" not in once.caption
    drawn = {path.suffix: path.read_bytes() for path in twice.paths}  # the same points and error bars, pixel for pixel
    assert drawn[".png"] == next(path for path in once.paths if path.suffix == ".png").read_bytes()
