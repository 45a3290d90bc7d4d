"""Section 1: constraint overhead: a constrained primal-dual step against an ERM step, per model."""

from __future__ import annotations

import statistics
from pathlib import Path

from suite.harness import Mode, Results, count_flops, interleave, op_deltas, op_self_times, say, timed, torch_profile
from suite.setup import Data, TEXT_OVERRIDES, VIT_OVERRIDES, app_steps, primal_dual_step


def section_constraint(res: Results, mode: Mode, data: Data, workdir: Path) -> None:
    say("1/7 constraint overhead: PrimalDual.step constrained vs ERM (B=4, T=10, P=100, n=256, L=3)")
    arms = {
        "ut_erm": primal_dual_step("ut", False, False, data),
        "ut_constrained": primal_dual_step("ut", True, False, data),
        "dust_erm_perlayer": primal_dual_step("dust", False, True, data),
        "dust_constrained_perlayer": primal_dual_step("dust", True, True, data),
        "dust_erm_shared": primal_dual_step("dust", False, False, data),
        "ut_erm_full_backward": primal_dual_step("ut", False, False, data, full_backward=True),
        "dust_erm_perlayer_full_backward": primal_dual_step("dust", False, True, data, full_backward=True),
    }
    times = interleave({name: timed(step) for name, (_, step) in arms.items()}, mode.cons_reps,
                       mode.cons_warmup, "constraint")
    note = ("Same model class, initial weights, batch and noise; the arms differ only in Constraints/DualSettings "
            "(alpha = the model's paper alpha, epsilon = l_0 at initialisation, slack resilience, dual Adam). ERM "
            "detaches Phi_0..Phi_{L-1} before the loss matrix, as Trainer.train_step does.")
    res.ratio("constraint_overhead.ut", 1, "UT: constrained step ÷ ERM step", "ut_constrained",
              times["ut_constrained"], "ut_erm", times["ut_erm"], note)
    res.ratio("constraint_overhead.dust", 1, "DUST (per-layer D in both arms): constrained ÷ ERM",
              "dust_constrained_perlayer", times["dust_constrained_perlayer"], "dust_erm_perlayer",
              times["dust_erm_perlayer"], note + " DUST uses one dictionary per layer in BOTH arms, so only the "
              "constraints differ.")
    res.ratio("constraint_overhead.dust_paper_pairing", 1,
              "DUST, paper pairing: constrained (per-layer D) ÷ ERM (shared D)", "dust_constrained_perlayer",
              times["dust_constrained_perlayer"], "dust_erm_shared", times["dust_erm_shared"],
              "The paper's configurations (App. C.4): ERM DUST has one shared dictionary, constrained DUST one per "
              "layer; this ratio mixes the constraint cost with the extra dictionaries.")
    waste_note = ("Reference arm, cutlab's ERM before commit f26cf11: PrimalDual.step on the loss matrix of undetached "
                  "Phi_0..Phi_L, which back-propagates exact zeros through every non-final layer's loss and readout "
                  "(the update is bit-identical). The figure is what the Trainer's detach saves per ERM step.")
    for kind, erm, full in (("ut", "ut_erm", "ut_erm_full_backward"),
                            ("dust", "dust_erm_perlayer", "dust_erm_perlayer_full_backward")):
        res.ratio(f"erm_waste.{kind}", 1, f"{kind.upper()}: ERM with the full backward (before f26cf11) ÷ cutlab's ERM",
                  full, times[full], erm, times[erm], waste_note, target_key="erm_waste")
    details = {
        "parameters": {name: sum(p.numel() for p in model.parameters()) for name, (model, _) in arms.items()},
        "step_medians_s": {name: statistics.median(t) for name, t in times.items()},
        "matmul_gflop_per_step": {name: count_flops(step) / 1e9 for name, (_, step) in arms.items()},
    }
    profiled = [("constraint_overhead.ut", arms, "ut_constrained", "ut_erm"),
                ("constraint_overhead.dust", arms, "dust_constrained_perlayer", "dust_erm_perlayer"),
                ("constraint_overhead.dust_paper_pairing", arms, "dust_constrained_perlayer", "dust_erm_shared")]
    app_note = ("Built by the app's code: the config composed from conf/ as `python -m cutlab {overrides} train=<erm|"
                "constrained> train.warmup_epochs=0` would (Hydra compose API), cutlab.tasks.build_task, "
                "reference_epsilon (one batch) and build_primal_dual; each arm times Trainer.train_step (batch to "
                "tokens/embeddings, seeded noise, forward, loss matrix, PrimalDual.step; ERM detaches "
                "Phi_0..Phi_{{L-1}}) on the same fixed training batch, from the same initial weights. {what}")
    for key, what, overrides, groups, detail in (
            ("vit", "ViT (DINOv2-small)", [*VIT_OVERRIDES, *vit_data(data, workdir)],
             {"erm": "erm", "constrained": "constrained"},
             "Real DINOv2-small weights (../shared/models/dinov2-small), all 12 blocks (the paper's L), 2 windows of "
             "2 frames of 160x160 (reflect-padded to 168: 145 tokens a frame); alpha = the paper's ViT alpha, "
             "epsilon=auto, slack resilience, dual lr 1e-2."),
            ("text", "text encoder (MiniLM-L6)", list(TEXT_OVERRIDES),
             {"erm": "erm_text", "constrained": "constrained_text_paper"},
             "all-MiniLM-L6-v2 (model=hf_encoder, L=6), 16 real IMDb reviews (imdb_train_tiny100.jsonl) "
             "truncated to 128 tokens; train presets erm_text / constrained_text_paper (the paper's language alpha, "
             "epsilon 1.0, dual lr 1.07, weight-decay resilience), train mode (dropout on)."),
    ):
        say(f"  {what}: building the task through the app ({' '.join(overrides)})")
        app_arms = {f"{key}_{arm}": value for arm, value in app_steps(overrides, groups).items()}
        erm, constrained = f"{key}_erm", f"{key}_constrained"
        app_times = interleave({name: timed(step) for name, (_, step) in app_arms.items()}, mode.app_reps,
                               mode.app_warmup, f"constraint {key}")
        res.ratio(f"constraint_overhead.{key}", 1, f"{what}: constrained step ÷ ERM step", constrained,
                  app_times[constrained], erm, app_times[erm],
                  app_note.format(overrides=" ".join(overrides), what=detail))
        details["parameters"].update({n: sum(p.numel() for p in m.parameters()) for n, (m, _) in app_arms.items()})
        details["step_medians_s"].update({n: statistics.median(t) for n, t in app_times.items()})
        details["matmul_gflop_per_step"].update({n: count_flops(step) / 1e9 for n, (_, step) in app_arms.items()})
        profiled.append((f"constraint_overhead.{key}", app_arms, constrained, erm))
    deep_dust_step(res, mode, data, workdir, details)
    res.details["constraint_overhead"] = details
    for fid, steps, slow, fast in profiled:
        if res.status_of(fid) == "NOT met":
            say(f"  profiling {slow} (target not met)")
            res.profiles[fid] = {
                "slower arm": slow,
                "table": torch_profile(steps[slow][1]),
                "differences": op_deltas(op_self_times(steps[slow][1]), op_self_times(steps[fast][1])),
            }


def vit_data(data: Data, workdir: Path) -> list[str]:
    """The ViT arms read the benchmark's video: Ped2 through its cache (already filled by Data), else synthetic."""
    cache = f"paths.cache_dir={workdir / 'cutlab-cache'}"
    if data.ped2 is not None:
        return ["data=ucsd_ped2", f"data.root={data.ped2}", cache]
    return ["data=synthetic", cache]


# The deep DUST default (train=constrained at L >= model.deep_from_layers) against the paper's dual, per step: a
# 400-step run of it took 1.9x the paper's dual's time beside it (benchmarks/FEASIBILITY_DEEP_DUST_PENALTY.md);
# the two further arms split that into the block gradient and the augmented Lagrangian.
DEEP_DUST_OVERRIDES = ("model=dust", "L=5")
DEEP_DUST_ARMS = {"deep_paper": "constrained_paper", "deep_default": "constrained",
                  "deep_default_full_gradient": "constrained train.constraint_gradient=full",
                  "deep_default_no_penalty": "constrained train.penalty=0"}


def deep_dust_step(res: Results, mode: Mode, data: Data, workdir: Path, details: dict) -> None:
    overrides = [*DEEP_DUST_OVERRIDES, *vit_data(data, workdir)]
    say(f"  deep DUST: building the task through the app ({' '.join(overrides)})")
    arms = app_steps(overrides, DEEP_DUST_ARMS)
    times = interleave({name: timed(step) for name, (_, step) in arms.items()}, mode.app_reps, mode.app_warmup,
                       "deep DUST")
    note = (f"Built by the app's code as `python -m cutlab {' '.join(overrides)} train=<group> "
            "train.warmup_epochs=0` would, on one fixed training batch from the same initial weights, every "
            "multiplier > 0 (so every layer is back-propagated in every arm, as a run whose constraints are live). "
            "Arms: " + "; ".join(f"{name} = train={spec}" for name, spec in DEEP_DUST_ARMS.items()) + ".")
    for fid, title, slow, fast in (
            ("deep_dust_step.default_vs_paper", "DUST L = 5: train=constrained step ÷ train=constrained_paper step",
             "deep_default", "deep_paper"),
            ("deep_dust_step.block_gradient", "DUST L = 5: train=constrained ÷ the same with the full gradient",
             "deep_default", "deep_default_full_gradient"),
            ("deep_dust_step.penalty", "DUST L = 5: train=constrained ÷ the same without the penalty (rho 0)",
             "deep_default", "deep_default_no_penalty")):
        res.ratio(fid, 1, title, slow, times[slow], fast, times[fast], note)
    details["parameters"].update({n: sum(p.numel() for p in m.parameters()) for n, (m, _) in arms.items()})
    details["step_medians_s"].update({n: statistics.median(t) for n, t in times.items()})
