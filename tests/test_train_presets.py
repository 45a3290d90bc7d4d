"""Each ERM preset trains on the same schedule as its constrained counterparts, so the arms of a comparison differ
in the constraints alone (the paper's Sec. 4 "Training": ERM (3) against the constrained problem (4), all runs
sharing the hyper-parameters).

The schedule is written in both presets' yaml (ERM does not inherit the constrained presets, whose dual keys would
enter its stored config and change how ERM records compare), so this test keeps the two copies equal: every key
both composed train configs hold must be equal, except the few that differ by design, listed with their reasons.
"""

from __future__ import annotations

import pytest

#: shared keys that differ by design between an ERM preset and its constrained counterpart
DIFFERENT_BY_DESIGN = {
    "constrained": "what tells the arms apart",
    # the primal warm-up freezes the multipliers at 0 (App. B.2), so a constrained run trains ERM's objective alone
    # during it; train.epochs counts it, so both arms still train train.epochs epochs in all. ERM has no multipliers
    # to hold back: its warmup_epochs is 0 (asserted below).
    "warmup_epochs": "the constrained arm's primal warm-up",
    # the constraint parameters ERM does not train on: detach_prev routes the constraints' gradients only, and
    # epsilon sets the reference bound of ERM's reported verdict (erm_text: the paper's model.paper.epsilon, which
    # constrained_text replaces by cutlab's 5 nats; erm_lm: auto, where constrained_lm_paper takes the paper's)
    "detach_prev": "routes the constraints' gradients, which ERM does not follow",
    "epsilon": "the reference bound of ERM's verdict, not trained on",
}

DUST = ["model=dust", "data=synthetic"]
VIT = ["model=vit", "data=synthetic"]
DISTILBERT_IMDB = ["model=hf_encoder", "L=6", "data=imdb"]
UT_TEXT_IMDB = ["model=ut_text", "L=3", "data=imdb"]
LLM = ["model=causal_lm", "data=alpaca"]

PAIRS = [
    pytest.param(DUST, "erm", "constrained_paper", id="erm-constrained_paper"),
    pytest.param(DUST, "erm", "constrained", id="erm-constrained"),
    pytest.param(VIT, "erm", "constrained", id="erm-constrained-vit"),
    pytest.param(DISTILBERT_IMDB, "erm_text", "constrained_text", id="erm_text-constrained_text"),
    pytest.param(DISTILBERT_IMDB, "erm_text", "constrained_text_paper", id="erm_text-constrained_text_paper"),
    pytest.param(UT_TEXT_IMDB, "erm_text", "constrained_text", id="erm_text-constrained_text-ut"),
    pytest.param(LLM, "erm_lm", "constrained_lm_paper", id="erm_lm-constrained_lm_paper"),
]


def composed_train(overrides: list[str]) -> dict:
    from omegaconf import OmegaConf

    from cutlab.config.compose import compose_run_config

    return OmegaConf.to_container(compose_run_config(overrides).train)


@pytest.mark.parametrize("setting, erm, constrained", PAIRS)
def test_an_erm_preset_has_its_constrained_counterparts_schedule(setting, erm, constrained):
    erm_train = composed_train([*setting, f"train={erm}"])
    constrained_train = composed_train([*setting, f"train={constrained}"])
    shared = (set(erm_train) & set(constrained_train)) - set(DIFFERENT_BY_DESIGN)
    # the schedule the audit names is among the compared keys, whatever else the two come to share
    assert {"epochs", "batch_size", "lr", "max_steps_per_epoch", "grad_clip", "alpha"} <= shared
    differing = {key: (erm_train[key], constrained_train[key]) for key in sorted(shared)
                 if erm_train[key] != constrained_train[key]}
    assert not differing, f"train={erm} and train={constrained} differ in (ERM, constrained): {differing}"
    assert erm_train["constrained"] is False and constrained_train["constrained"] is True
    assert erm_train["warmup_epochs"] == 0 and constrained_train["warmup_epochs"] < constrained_train["epochs"]
