"""How the report tells runs apart: a run repeated with the same seed (the same sweep run on two machines, or
copied into two folders) is one seed's sample, never two seeds' (Figs 5, 14, 15 error bars); and a setting that
does not change a result (the launcher's) never names a difference between runs in a figure's title."""

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


def test_an_ablation_point_averages_seeds_of_one_configuration_never_two_dual_settings(tmp_path):
    # alpha 0.2 and 0.3 with the defaults and alpha 0.2 in the difference form without detach_prev: the 0.2 point was
    # the mean of two dual settings, captioned "1 runs repeat the seed of another run at their point"
    from analysis.collect import collect_runs
    from analysis.figures_metric import ablation_groups, alpha_ablation

    cell = dict(model="dust", dataset="synthetic", L=3, gamma=0.09, constrained=True, selection=12.0)
    ratio = {"constraint_form": "ratio", "detach_prev": True}
    for name, alpha, train, test in (("a0.2", 0.2, ratio, 12.0), ("a0.3", 0.3, ratio, 11.0),
                                     ("a0.2_difference", 0.2, {"constraint_form": "difference"}, 20.0),
                                     ("a0.3_difference", 0.3, {"constraint_form": "difference"}, 19.0),
                                     ("a0.4_difference", 0.4, {"constraint_form": "difference"}, 18.0)):
        write_run(tmp_path / "runs", name, **cell, alpha=alpha, train=train, test=test)
    runs = collect_runs(tmp_path / "runs")
    assert sorted(sorted(group["run"]) for group in ablation_groups(runs, "alpha")) == [
        ["a0.2", "a0.3"], ["a0.2_difference", "a0.3_difference", "a0.4_difference"]]
    figure = alpha_ablation(runs, tmp_path / "out")
    assert "(1 seeds per point)" in figure.caption and "repeat" not in figure.caption, figure.caption


def test_a_figure_title_never_tells_runs_apart_by_a_launch_setting():
    # the dual-variable panels of benchmarks/cpu_paper_budget read "detach_prev=True · max_parallel=2": the sweep's
    # launcher.max_parallel (how many runs at once) does not change a result, and the tables never count it a trial
    import pandas as pd

    from analysis.figure_kit import distinguishing

    frame = pd.DataFrame({"cfg.train.detach_prev": [True, "first", True], "cfg.launcher.max_parallel": [2, 2, 1],
                          "cfg.checkpoint.every_steps": [100, 100, 50]})
    assert distinguishing(frame, frame.iloc[0]) == "detach_prev=True"
    assert distinguishing(frame.iloc[[0, 2]], frame.iloc[2]) == ""


def test_the_report_names_the_code_and_devices_its_runs_came_from_where_they_differ(tmp_path, capsys):
    # a row of Table 3 set a CPU run of one commit beside a GPU run of another, dirty one, and said nothing of it
    import json

    from helpers.analysis import run_main

    cell = dict(model="dust", dataset="ucsd_ped2", L=3, gamma=0.09, constrained=True, test=14.0, selection=14.0)
    for name, commit, dirty, device in (("cpu", "88a0230787", False, "cpu"), ("gpu", "ee7bed3716", True, "cuda")):
        run = write_run(tmp_path / "runs", name, **cell, seed=0)
        (run / "provenance.json").write_text(json.dumps({"git_commit": commit, "git_dirty": dirty, "device": device,
                                                         "versions": {"cutlab": "0.1.0"}}))
    code, err = run_main(str(tmp_path / "runs"), "--out", str(tmp_path / "report"), capsys=capsys)
    assert code == 0, err
    report = (tmp_path / "report" / "report.md").read_text()
    assert ("Code and machines: the complete runs come from 2 git commits (88a0230, ee7bed3); 1 of 2 with "
            "uncommitted changes; devices cpu, cuda.") in report
    (tmp_path / "runs" / "gpu" / "provenance.json").unlink()
    (tmp_path / "runs" / "gpu" / "summary.json").unlink()  # one clean run of one commit: nothing to say
    run_main(str(tmp_path / "runs"), "--out", str(tmp_path / "report"), capsys=capsys)
    assert "Code and machines" not in (tmp_path / "report" / "report.md").read_text()
