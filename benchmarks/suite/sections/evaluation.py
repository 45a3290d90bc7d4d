"""Section 3: evaluation over the gamma_test grid against plain forward passes."""

from __future__ import annotations

import torch

from cutlab.core.evaluation import evaluate
from cutlab.core.perturbation import Perturbation
from cutlab.core.objectives import DenoisingObjective
from cutlab.core.training import collate

from suite.harness import BATCH, GAMMA, GAMMA_GRID, K_GAMMAS, Mode, Results, interleave, op_deltas, op_self_times, say, timed, torch_profile
from suite.setup import Data, make_model


def section_evaluation(res: Results, mode: Mode, data: Data) -> None:
    say(f"3/7 evaluation: evaluate() over a {K_GAMMAS}-point gamma_test grid ÷ {K_GAMMAS} plain forward passes")
    samples = torch.utils.data.Subset(data.test, range(min(mode.eval_samples, len(data.test))))
    objective = DenoisingObjective()
    batches = [data.tokens(collate(samples, idx)) for idx in torch.arange(len(samples)).split(BATCH)]
    for kind in ("dust", "ut"):
        model = make_model(kind, per_layer=(kind == "dust"))  # the app's constrained DUST has per-layer D
        model.eval()

        def sweep(model=model) -> None:
            evaluate(model, objective, samples, data.prepare, GAMMA_GRID, Perturbation(GAMMA, data.sigma), BATCH, "cpu")

        def plain(model=model) -> None:
            with torch.no_grad():
                for batch in batches:
                    for _ in range(K_GAMMAS):
                        model(batch)

        stacked_batches = [torch.cat([batch] * K_GAMMAS) for batch in batches]

        def stacked(model=model, stacked_batches=stacked_batches) -> None:
            with torch.no_grad():
                for batch in stacked_batches:
                    model(batch)

        times = interleave({"evaluate": timed(sweep), "stacked": timed(stacked), "plain": timed(plain)},
                           mode.eval_reps, 1 if mode.name == "full" else 0, f"evaluation {kind}")
        fid = f"evaluation.{kind}"
        res.ratio(fid, 3, f"{kind.upper()}: evaluate() over {K_GAMMAS} gammas × all L+1 layers ÷ "
                  f"{K_GAMMAS} plain forward passes", "evaluate", times["evaluate"], "plain forwards",
                  times["plain"],
                  f"{len(samples)} Ped2 test windows in batches of {BATCH}. evaluate() perturbs every batch at all "
                  f"{K_GAMMAS} gammas, runs one forward on the {K_GAMMAS * BATCH} stacked copies and reads every layer; "
                  "the plain arm is the bare forward of the clean batch, k times (no noise, no metrics).")
        res.ratio(f"evaluation_split.{kind}_batching", 3,
                  f"{kind.upper()}: one forward of the {K_GAMMAS}×{BATCH} stacked copies ÷ {K_GAMMAS} forwards of {BATCH}",
                  "stacked forward", times["stacked"], "plain forwards", times["plain"],
                  "The batching choice of evaluate() alone (no noise, no metrics): on CPU a bigger batch is not "
                  "free, its activations leave the caches.", target_key="split")
        res.ratio(f"evaluation_split.{kind}_metrics", 3,
                  f"{kind.upper()}: evaluate() ÷ the stacked forward alone",
                  "evaluate", times["evaluate"], "stacked forward", times["stacked"],
                  "Everything evaluate() adds to the forward: collate and patch tokens, k seeded noise draws, the "
                  "concatenation, per-gamma metric sums and loss matrix (each recomputes (out - clean)^2).",
                  target_key="split")
        if res.status_of(fid) == "NOT met":
            say(f"  profiling evaluate() for {kind} (target not met)")
            res.profiles[fid] = {"slower arm": "evaluate", "table": torch_profile(sweep),
                                 "differences": op_deltas(op_self_times(sweep), op_self_times(plain))}
