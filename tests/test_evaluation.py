"""Perturbation, evaluation over the gamma_test grid, descent ratios and the feasibility verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cutlab.core.evaluation import evaluate, feasibility_verdict, violation_intervals
from cutlab.core.models import DUST
from cutlab.core.objectives import DenoisingObjective
from cutlab.core.perturbation import EVAL_STREAM, TRAIN_STREAM, Perturbation, noise_generator, noise_seed, perturb
from cutlab.core.constraints import Constraints


def test_perturbation_has_the_requested_mean_and_standard_deviation():
    clean = torch.full((200_000,), 0.5)
    for gamma, sigma, mean in ((0.09, 0.25, 0.0), (1.0, 0.2, 0.03), (0.5, 1.0, -0.1)):
        noise = perturb(clean, gamma, sigma, mean, noise_generator(0, TRAIN_STREAM, 7)) - clean
        assert math.isclose(float(noise.std()), gamma * sigma, rel_tol=0.01)
        assert math.isclose(float(noise.mean()), mean, abs_tol=4 * gamma * sigma / math.sqrt(noise.numel()))
    # gamma 0 with a mean is a pure shift (no noise drawn); only gamma 0 and mean 0 hands back the clean input itself
    assert torch.equal(perturb(clean, 0.0, 0.25, 0.25, noise_generator(0, TRAIN_STREAM, 7)), clean + 0.25)
    assert perturb(clean, 0.0, 0.25, 0.0, noise_generator(0, TRAIN_STREAM, 7)) is clean


def test_no_two_seeds_streams_or_indices_share_their_noise_and_old_records_keep_theirs():
    # the linear seed once made training step 7919 + i draw evaluation index i's noise, and seed 1's evaluation
    # index 5000 seed 0's index 1005003 (a text split of over 1000 batches)
    clean = torch.zeros(1000)
    draw = lambda seed, stream, index: perturb(clean, 1.0, 1.0, 0.0, noise_generator(seed, stream, index))  # noqa: E731
    assert not torch.equal(draw(0, TRAIN_STREAM, 7919 + 3002), draw(0, EVAL_STREAM, 3002))
    assert not torch.equal(draw(1, EVAL_STREAM, 5000), draw(0, EVAL_STREAM, 1_005_003))
    seeds = [noise_seed(seed, stream, index) for seed in range(3) for stream in (TRAIN_STREAM, EVAL_STREAM)
             for index in [*range(0, 12_000, 7), *range(990_000, 1_010_000, 11), 10**9]]
    assert len(set(seeds)) == len(seeds)
    # inside the ranges every committed record drew from (steps < 7919, evaluation indices < 992084), the same seeds
    assert noise_seed(3, TRAIN_STREAM, 2850) == 3 * 1_000_003 + 2850
    assert noise_seed(0, EVAL_STREAM, 781 * 1000 + 1) == 7_919 + 781_001


def test_noise_is_a_function_of_seed_stream_and_index_only():
    clean = torch.zeros(1000)
    draw = lambda seed, stream, index: perturb(clean, 1.0, 1.0, 0.0, noise_generator(seed, stream, index))
    assert torch.equal(draw(3, TRAIN_STREAM, 5), draw(3, TRAIN_STREAM, 5))
    assert not torch.equal(draw(3, TRAIN_STREAM, 5), draw(3, TRAIN_STREAM, 6))
    assert not torch.equal(draw(3, TRAIN_STREAM, 5), draw(3, EVAL_STREAM, 5))
    assert not torch.equal(draw(3, TRAIN_STREAM, 5), draw(4, TRAIN_STREAM, 5))
    assert perturb(clean, 0.0, 1.0, 0.0, noise_generator(0, 0, 0)) is clean


class Samples:
    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __len__(self) -> int:
        return len(self.tensor)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.tensor[index]


def test_evaluate_matches_a_plain_loop_over_gammas_and_batches(ped2_tokens):
    """One forward per batch for all gammas gives the same numbers as one forward per gamma and sample."""
    model, objective = DUST(depth=2), DenoisingObjective()
    samples = Samples(torch.cat([ped2_tokens, ped2_tokens.flip(1)]))  # 4 samples, batches of 3 + 1
    gammas, sigma = [0.0, 0.3, 1.0], 0.2
    result = evaluate(model, objective, samples, lambda x: (x, x), gammas, Perturbation(0.0, sigma, seed=5),
                      batch_size=3)
    for g, gamma in enumerate(gammas):
        squared, count, losses = torch.zeros(3, dtype=torch.float64), 0, []
        for batch_index, start in enumerate((0, 3)):
            clean = samples.tensor[start : start + 3]
            noisy = perturb(clean, gamma, sigma, 0.0, noise_generator(5, EVAL_STREAM, batch_index * 1_000 + g))
            outputs = model(noisy)
            squared += torch.stack([((o - clean) ** 2).sum() for o in outputs]).double()
            count += clean.numel()
            losses.append(objective.loss_matrix(outputs, clean))
        torch.testing.assert_close(result.metric[g], 255 * torch.sqrt(squared / count), rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(result.sample_losses[g], torch.cat(losses).detach(), rtol=1e-5, atol=1e-5)
    assert result.metric[2, 0] > result.metric[0, 0]  # more noise, worse Phi_0


def test_ratio_statistics():
    from cutlab.core.evaluation import Evaluation

    losses = torch.tensor([[[4.0, 2.0, 3.0], [1.0, 0.5, 0.25]]])  # ratios 0.5, 1.5, 0.5, 0.5
    stats = Evaluation([0.0], "rmse", torch.zeros(1, 3), losses.mean(1), losses).ratio_stats(0)
    assert stats == {"ratio_mean": 0.75, "ratio_median": 0.5, "fraction_decreasing": 0.75, "ratio_pairs_left_out": 0}
    # a sample that a layer reproduces exactly (cross-entropy 0) has no ratio after it: left out and counted, not
    # divided by the smallest float (a mean of 1e28, and 0 / 0 counted as descent)
    losses = torch.tensor([[[4.0, 2.0, 3.0], [1.0, 0.5, 0.25], [0.3, 0.0, 0.2], [0.2, 0.0, 0.0]]])
    stats = Evaluation([0.0], "rmse", torch.zeros(1, 3), losses.mean(1), losses).ratio_stats(0)
    assert stats["ratio_pairs_left_out"] == 2 and stats["ratio_median"] == 0.5
    assert stats["ratio_mean"] == pytest.approx((0.5 + 1.5 + 0.5 + 0.5 + 0.0 + 0.0) / 6)
    assert stats["fraction_decreasing"] == pytest.approx(5 / 6)
    # an even count's median is the mean of its two middle values, as numpy's (Fig. 12's annotation)
    losses = torch.tensor([[[4.0, 2.0, 3.0], [1.0, 0.9, 0.45]]])  # ratios 0.5, 1.5, 0.9, 0.5
    stats = Evaluation([0.0], "rmse", torch.zeros(1, 3), losses.mean(1), losses).ratio_stats(0)
    assert stats["ratio_median"] == pytest.approx(float(np.median([0.5, 1.5, 0.9, 0.5]))) == pytest.approx(0.7)
    # a ratio of exactly 1 (a layer that keeps its loss) is not a descent
    losses = torch.tensor([[[1.0, 1.0, 0.5]]])  # ratios 1.0, 0.5
    stats = Evaluation([0.0], "rmse", torch.zeros(1, 3), losses.mean(1), losses).ratio_stats(0)
    assert stats["fraction_decreasing"] == 0.5


def test_verdict_counts_slacks_and_tolerance_and_marks_erm_unconstrained():
    constraints = Constraints(alpha=0.5, epsilon=1.0)
    losses = torch.tensor([1.0, 0.6, 0.3])  # g = [0, 0.1, 0.0]: layer 1 misses by 0.1 (20 % of its 0.5 target)
    strict = feasibility_verdict(losses, constraints, torch.zeros(3), tolerance=0.02, constrained=True)
    assert strict.status == "infeasible" and strict.violated_layers == [1]
    relaxed = feasibility_verdict(losses, constraints, torch.tensor([0.0, 0.1, 0.0]), tolerance=0.02, constrained=True)
    # met only through its slack, and said so: 0.1 of slack is 20 % of layer 1's right-hand side (1-alpha) l_0 = 0.5
    assert relaxed.status == "slack_feasible" and relaxed.slack_layers == [1] and relaxed.violated_layers == []
    assert relaxed.relative_slacks[1] == pytest.approx(0.2) and relaxed.relative_violations[1] == pytest.approx(0.2)
    tolerant = feasibility_verdict(losses, constraints, torch.zeros(3), tolerance=0.25, constrained=True)
    assert tolerant.status == "feasible"
    # a loss exactly on its bound meets it, with no tolerance; so does one exactly on its bound plus its slack
    on_bound = feasibility_verdict(torch.tensor([1.0, 0.5, 0.25]), constraints, torch.zeros(3), 0.0, True)
    assert on_bound.status == "feasible" and on_bound.relative_violations == [0.0, 0.0, 0.0]
    slack = torch.tensor([0.0, 0.25, 0.0])  # 50 % of layer 1's right-hand side 0.5
    on_slack = feasibility_verdict(torch.tensor([1.0, 0.75, 0.375]), constraints, slack, 0.0, True)
    assert on_slack.status == "slack_feasible" and on_slack.relative_violations[1] == on_slack.relative_slacks[1] == 0.5
    erm = feasibility_verdict(losses, constraints, torch.zeros(3), tolerance=0.02, constrained=False)
    assert erm.status == "unconstrained" and erm.violated_layers == [1]
    no_reference = feasibility_verdict(torch.tensor([9.0, 4.0]), Constraints(alpha=0.5), torch.zeros(2), 0.0, True)
    assert no_reference.status == "feasible"  # epsilon off: l_0 = 9 is not a violation
    assert no_reference.last_layer_bound is None  # nothing bounds l_L without the reference constraint


@pytest.mark.parametrize("form", ["difference", "ratio", "log_ratio"])
def test_verdict_records_what_the_chain_of_constraints_allows_the_last_layer(form):
    # epsilon 2, alpha 0.5, L = 3: l_3 <= 2 * 0.5^3 = 0.25 for every form of the same constraints
    constraints = Constraints(alpha=0.5, epsilon=2.0, form=form)
    short = feasibility_verdict(torch.tensor([1.0, 0.6, 0.35, 0.3]), constraints, torch.zeros(4), 0.02, True)
    assert short.last_layer_bound == pytest.approx(0.25) and short.last_layer_loss == pytest.approx(0.3)
    assert short.status == "infeasible" and short.violated_layers == [1, 2, 3]
    # the chain's bound is necessary, not sufficient: l_3 = 0.1 is well below it and layer 2 still misses its step
    out_of_step = feasibility_verdict(torch.tensor([1.0, 0.4, 0.3, 0.1]), constraints, torch.zeros(4), 0.02, True)
    assert out_of_step.violated_layers == [2] and out_of_step.last_layer_loss < out_of_step.last_layer_bound


@pytest.mark.parametrize("form,slack", [("difference", 0.1), ("ratio", 0.1), ("log_ratio", math.log(1.1))])
def test_a_slack_on_the_reference_constraint_relaxes_epsilon_by_the_same_fraction_in_every_form(form, slack):
    """u_0 lets l_0 reach epsilon (1 + s_0): s_0 = u_0 / epsilon (difference), u_0 (ratio: g_0 = l_0 / epsilon - 1,
    no (1 - alpha) to divide by, unlike the descent constraints), e^u_0 - 1 (log_ratio). Here s_0 = 10 %."""
    constraints, slacks = Constraints(alpha=0.5, epsilon=1.0, form=form), torch.tensor([slack, 0.0, 0.0])
    within = feasibility_verdict(torch.tensor([1.1, 0.5, 0.2]), constraints, slacks, 0.02, True)
    assert within.relative_slacks[0] == pytest.approx(0.1)
    assert within.status == "slack_feasible" and within.slack_layers == [0]
    beyond = feasibility_verdict(torch.tensor([1.15, 0.5, 0.2]), constraints, slacks, 0.02, True)  # 15 % > 10 % + 2 %
    assert beyond.status == "infeasible" and beyond.violated_layers == [0]


def test_violation_intervals_are_a_percentile_bootstrap_of_the_relative_violations():
    """Against a plain numpy bootstrap of the formula (l_l / ((1 - alpha) l_{l-1}) - 1, l_0 / epsilon - 1), with
    the interval collapsing onto the point when every sample is the same and narrowing as 1/sqrt(N)."""
    import numpy as np

    constraints = Constraints(alpha=0.25, epsilon=2.0, form="ratio")
    rng = np.random.default_rng(1)
    samples = rng.gamma(2.0, 1.0, size=(800, 4)) * np.array([1.5, 1.2, 0.9, 0.7])  # [N, L+1], skewed like losses
    as_pairs = lambda found: np.array([found["low"], found["high"]]).T  # noqa: E731
    intervals = as_pairs(violation_intervals(torch.tensor(samples), constraints, resamples=4000))

    def violations(means):
        return np.concatenate([means[:1] / 2.0 - 1, means[1:] / (0.75 * means[:-1]) - 1])
    draws = np.stack([violations(samples[rng.integers(0, 800, 800)].mean(0)) for _ in range(4000)])
    expected = np.percentile(draws, [5, 95], axis=0).T
    width = expected[:, 1] - expected[:, 0]
    np.testing.assert_allclose(intervals, expected, atol=0.08 * width.max())
    point = violations(samples.mean(0))
    assert all(low < p < high for (low, high), p in zip(intervals, point))

    same = torch.tensor(samples[:1]).repeat(50, 1)
    for (low, high), p in zip(as_pairs(violation_intervals(same, constraints, resamples=50)), violations(samples[0])):
        assert low == pytest.approx(p) and high == pytest.approx(p)

    quarter = as_pairs(violation_intervals(torch.tensor(samples[:200]), constraints, resamples=4000))
    ratio = (np.diff(quarter, axis=1) / np.diff(intervals, axis=1)).flatten()
    assert np.all((ratio > 1.5) & (ratio < 2.7))  # a quarter of the samples: about twice as wide

    without_epsilon = violation_intervals(torch.tensor(samples), Constraints(alpha=0.25), resamples=100)
    assert without_epsilon["layers"] == [1, 2, 3] and len(without_epsilon["low"]) == 3


def test_too_few_ungrouped_samples_get_no_interval():
    """Text of one's own with a few reviews: one validation review gave a "90 % interval" of width 0 ([+11.4, +11.4]);
    below MIN_INTERVAL_GROUPS samples there is none, as below that many clips."""
    from cutlab.core.evaluation import MIN_INTERVAL_GROUPS

    constraints = Constraints(alpha=0.25, epsilon=2.0, form="ratio")
    for count in (1, MIN_INTERVAL_GROUPS - 1):
        found = violation_intervals(torch.rand(count, 4) + 0.5, constraints, resamples=50)
        assert (found["low"], found["high"], found["count"], found["resampled"]) == ([], [], count, "sample")
    assert len(violation_intervals(torch.rand(MIN_INTERVAL_GROUPS, 4) + 0.5, constraints, resamples=50)["low"]) == 4


def test_grouped_samples_are_resampled_by_group():
    """With groups (video clips), whole groups are resampled: against a numpy cluster bootstrap of the same formula
    (sums over the drawn groups' samples), wider than resampling samples when samples within a group are alike,
    and no interval (empty low/high, the count recorded) below MIN_INTERVAL_GROUPS groups."""
    import numpy as np

    from cutlab.core.data.groups import SampleGroups
    from cutlab.core.evaluation import MIN_INTERVAL_GROUPS

    constraints = Constraints(alpha=0.25, epsilon=2.0, form="ratio")
    rng = np.random.default_rng(2)
    sizes = rng.integers(5, 16, size=40)
    ids = np.repeat(np.arange(40), sizes)
    scene = rng.gamma(4.0, 0.25, size=(40, 4))  # a clip's own difficulty at each layer, shared by its windows
    samples = scene[ids] * np.array([1.5, 1.2, 0.9, 0.7]) * rng.gamma(20.0, 0.05, size=(len(ids), 4))
    groups = SampleGroups(torch.tensor(ids), "clip")
    found = violation_intervals(torch.tensor(samples), constraints, groups, resamples=4000)
    assert (found["resampled"], found["count"], found["layers"]) == ("clip", 40, [0, 1, 2, 3])

    def violations(means):
        return np.concatenate([means[:1] / 2.0 - 1, means[1:] / (0.75 * means[:-1]) - 1])
    totals = np.stack([samples[ids == g].sum(0) for g in range(40)])
    draws = []
    for _ in range(4000):
        picked = rng.integers(0, 40, 40)
        draws.append(violations(totals[picked].sum(0) / sizes[picked].sum()))
    expected = np.percentile(np.stack(draws), [5, 95], axis=0).T
    intervals = np.array([found["low"], found["high"]]).T
    np.testing.assert_allclose(intervals, expected, atol=0.08 * (expected[:, 1] - expected[:, 0]).max())
    by_sample = violation_intervals(torch.tensor(samples), constraints, resamples=4000)
    assert by_sample["resampled"] == "sample" and by_sample["count"] == len(ids)
    assert np.all(np.diff(intervals, axis=1).flatten() > 1.5 * np.diff([by_sample["low"], by_sample["high"]], axis=0))

    few = ids < MIN_INTERVAL_GROUPS - 1
    too_few = violation_intervals(torch.tensor(samples[few]), constraints, SampleGroups(torch.tensor(ids[few]), "clip"))
    assert too_few == {"layers": [0, 1, 2, 3], "resampled": "clip", "count": MIN_INTERVAL_GROUPS - 1,
                       "low": [], "high": []}


def test_frame_windows_say_which_clip_each_window_comes_from():
    import numpy as np

    from cutlab.core.data import FrameWindows

    clips = {"b_second": np.zeros((20, 16, 16), np.uint8), "a_first": np.zeros((30, 16, 16), np.uint8)}
    windows = FrameWindows(clips, frames=10, stride=5)
    assert [name for name, _ in windows.index] == ["b_second"] * 3 + ["a_first"] * 5
    assert windows.sample_groups.ids.tolist() == [0] * 3 + [1] * 5 and windows.sample_groups.unit == "clip"


def test_cutlab_evals_split_all_keeps_each_clips_windows_one_group():
    """``--split all`` joins the train, validation and test windows; a ConcatDataset has no sample_groups, so the
    verdict's interval resampled windows as independent samples (and gave one over fewer than 10 clips)."""
    from types import SimpleNamespace

    import numpy as np

    from cutlab.core.data import FrameWindows
    from cutlab.transfer.evaluate import split_of

    def windows(*lengths):
        return FrameWindows({f"clip{i}": np.zeros((n, 8, 8), np.uint8) for i, n in enumerate(lengths)}, frames=4,
                            stride=4)

    task = SimpleNamespace(train_set=windows(8, 4), val_set=windows(8), test_set=windows(4, 12))
    joined = split_of(task, "all")
    assert len(joined) == 2 + 1 + 2 + 1 + 3
    assert joined.sample_groups.ids.tolist() == [0, 0, 1, 2, 2, 3, 4, 4, 4] and joined.sample_groups.unit == "clip"
    assert split_of(task, "test").sample_groups is task.test_set.sample_groups


def test_a_degenerate_slot_has_an_infinite_interval_and_the_others_are_unchanged():
    """UT at gamma_train 0 in the difference form: Phi_0 is the clean input, so l_0 = 0 in every sample and the
    first descent constraint's right-hand side is 0 (relative violation inf). Its interval is [inf, inf], not nan,
    and the next slot's interval is the one it has without the degenerate column beside it."""
    rng = torch.Generator().manual_seed(3)
    later = torch.rand(300, 2, generator=rng, dtype=torch.float64) + 0.5
    samples = torch.cat([torch.zeros(300, 1, dtype=torch.float64), later], dim=1)  # [N, L+1], l_0 = 0
    constraints = Constraints(alpha=0.5)
    found = violation_intervals(samples, constraints, resamples=200)
    assert found["layers"] == [1, 2]
    assert found["low"][0] == found["high"][0] == math.inf
    shifted = violation_intervals(torch.cat([torch.ones(300, 1, dtype=torch.float64), later], dim=1), constraints,
                                  resamples=200)
    assert (found["low"][1], found["high"][1]) == (shifted["low"][1], shifted["high"][1])
    assert math.isfinite(found["low"][1]) and found["low"][1] < found["high"][1]


def test_a_reference_at_the_target_makes_a_run_that_misses_degenerate_not_infeasible():
    """UT at gamma 0 in the paper's difference form: epsilon=auto is l_0 of the untrained model, a round-off of 0, and
    every constraint chains down to it; it read slack-feasible with a slack of millions of % (or infeasible)."""
    losses = torch.tensor([0.002, 0.01, 0.04])  # l_0 grew from its round-off, and the layers raise the loss
    for at_target, expected in ((False, "infeasible"), (True, "degenerate")):
        constraints = Constraints(alpha=0.22, epsilon=5e-8, reference_at_target=at_target)
        verdict = feasibility_verdict(losses, constraints, torch.zeros(3), tolerance=0.02, constrained=True)
        assert verdict.status == expected
    assert verdict.degenerate_layers == [0, 1, 2] and verdict.violated_layers == []
    met = feasibility_verdict(torch.tensor([1e-8, 1e-9, 1e-10]), constraints, torch.zeros(3), 0.02, True)
    assert met.status == "feasible"  # a run that meets them all is still said to
    erm = feasibility_verdict(losses, constraints, torch.zeros(3), 0.02, constrained=False)
    assert erm.status == "unconstrained"
