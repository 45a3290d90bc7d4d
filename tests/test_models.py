"""The layerwise models against their equations (paper Sec. 4, App. C), and the model contract."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.contract import steps_on_a_fixed_batch

from cutlab.core.models import DUST, UT
from cutlab.core.models.base import from_sequences, symmetric_attention, to_sequences
from cutlab.core.models.dct import dct_2d_dictionary
from cutlab.core.models.dust import soft_threshold
from cutlab.core.objectives import DenoisingObjective


def test_dct_dictionary_is_an_overcomplete_unit_norm_dct_frame():
    dictionary = dct_2d_dictionary(16, 512).double()
    assert dictionary.shape == (256, 512)
    torch.testing.assert_close(dictionary.norm(dim=0), torch.ones(512, dtype=torch.float64))
    assert torch.linalg.matrix_rank(dictionary) == 256  # spans the patch space
    # the first atom is the constant (DC) patch; the second varies along one axis only (a 1-D cosine)
    torch.testing.assert_close(dictionary[:, 0], torch.full((256,), 1 / 16, dtype=torch.float64))
    second = dictionary[:, 1].reshape(16, 16)
    assert torch.allclose(second, second[:1].expand(16, 16)) or torch.allclose(second, second[:, :1].expand(16, 16))
    assert not torch.allclose(second, torch.full_like(second, second[0, 0].item()))


@pytest.mark.parametrize("atoms", [226, 240, 255, 256, 300, 512])
def test_a_dct_dictionary_spans_the_patch_or_is_refused(atoms):
    """226 to 255 atoms passed the check for 16x16 patches (ceil(sqrt(atoms)) >= 16) and gave a dictionary of
    rank < 256, whose D D^T UT's encoder inverts: its untrained Phi_0 missed its input by up to 110 (on [0, 1])."""
    if atoms < 256:
        with pytest.raises(ValueError, match=f"needs at least 256 atoms for 16x16 patches, got {atoms}"):
            dct_2d_dictionary(16, atoms)
        return
    assert int(torch.linalg.matrix_rank(dct_2d_dictionary(16, atoms).double())) == 256


def test_dust_layer_is_a_lista_step_of_its_dictionary(ped2_tokens):
    """Phi_l = D H_l with H_l = soft_theta((I - D^T D / c) Z + D^T x / c), checked with the matrices written out."""
    torch.manual_seed(0)
    model = DUST(depth=2, threshold=0.02, attention_step=0.3, per_layer_dictionary=True).double()
    with torch.no_grad():
        for dictionary in model.dictionaries:  # distinct dictionaries so a mix-up of layers would show
            dictionary.add_(0.01 * torch.randn_like(dictionary))
    model.converge_step_sizes()
    x = ped2_tokens.double()
    outputs = model(x)
    sequences = to_sequences(x)
    codes = None
    for layer, dictionary in enumerate(model.dictionaries):
        c = torch.linalg.matrix_norm(dictionary, ord=2) ** 2  # the exact Lipschitz constant
        torch.testing.assert_close(model.step_size(layer), c, rtol=1e-6, atol=0)  # ... which power iteration tracks
        if layer == 0:
            codes = soft_threshold(sequences @ dictionary / c, 0.02)
        else:
            scores = torch.softmax((codes @ dictionary.T) @ (codes @ dictionary.T).transpose(1, 2) / 256, dim=-1)
            attended = 0.7 * codes + 0.3 * scores @ codes
            lista = torch.eye(512, dtype=torch.float64) - dictionary.T @ dictionary / c
            codes = soft_threshold(attended @ lista + sequences @ dictionary / c, 0.02)
        torch.testing.assert_close(outputs[layer], from_sequences(codes @ dictionary.T, x.shape[0]))


def test_dust_evaluates_each_sample_alike_whatever_the_batches_and_what_came_before(ped2_tokens):
    # training moves D a little per step and refines the estimate of ||D||_2^2 behind it; an evaluation must read
    # that estimate, not move it: otherwise a sample's output depends on the batches evaluated before its own
    torch.manual_seed(0)
    model = DUST(depth=2, threshold=0.02, per_layer_dictionary=True)
    with torch.no_grad():
        for dictionary in model.dictionaries:  # as after a training step: the estimate lags the dictionary
            dictionary.mul_(1 + 0.2 * torch.rand_like(dictionary))
    model.eval()
    state = {name: buffer.clone() for name, buffer in model.named_buffers()}
    with torch.no_grad():
        together = model(ped2_tokens)[-1]
        one_by_one = torch.cat([model(ped2_tokens[:1])[-1], model(ped2_tokens[1:])[-1]])
        again = model(ped2_tokens)[-1]
    torch.testing.assert_close(one_by_one, together)
    assert torch.equal(again, together)
    for name, buffer in model.named_buffers():
        assert torch.equal(buffer, state[name]), name


def test_dust_can_train_with_the_exact_step_size_and_its_gradient():
    # power iteration is a lower bound that lags a moving dictionary (c < ||D||_2^2, a step longer than the paper's
    # App. C allows); lipschitz_estimate=exact is ||D||_2^2 itself, with the gradient of sigma_max^2
    torch.manual_seed(0)
    models = {rule: DUST(depth=1, lipschitz_estimate=rule).double() for rule in ("power_iteration", "exact")}
    moved = 1 + 0.2 * torch.rand_like(models["exact"].dictionaries[0])  # as after training steps
    for model in models.values():
        with torch.no_grad():
            model.dictionaries[0].mul_(moved)
        model.train()
    dictionary = models["exact"].dictionaries[0]
    exact = torch.linalg.svdvals(dictionary)[0] ** 2
    c = models["exact"].step_size(0)
    torch.testing.assert_close(c, exact)
    assert models["power_iteration"].step_size(0) < exact  # a lower bound: what the option is for
    (gradient,) = torch.autograd.grad(c, dictionary)
    u, sigma, vh = torch.linalg.svd(dictionary.detach(), full_matrices=False)
    torch.testing.assert_close(gradient, 2 * sigma[0] * torch.outer(u[:, 0], vh[0]))
    with pytest.raises(ValueError, match="lipschitz_estimate must be one of power_iteration, exact, got 'svd'"):
        DUST(depth=1, lipschitz_estimate="svd")
    for iterations in (0, -1):  # +model.power_iterations=-1 trained with c frozen at its start, without a word
        with pytest.raises(ValueError, match=f"power_iterations must be >= 1 .*, got {iterations}"):
            DUST(depth=1, power_iterations=iterations)
    DUST(depth=1, power_iterations=0, lipschitz_estimate="exact")  # the exact estimate does not iterate


def test_dust_trains_only_its_dictionaries_shared_for_erm_per_layer_when_constrained():
    shared, per_layer = DUST(depth=3), DUST(depth=3, per_layer_dictionary=True)
    assert [p.shape for p in shared.parameters()] == [(256, 512)]
    assert [p.shape for p in per_layer.parameters()] == [(256, 512)] * 4


def test_dust_descends_at_initialisation_like_ista(ped2_tokens):
    losses = DenoisingObjective().loss_matrix(DUST(depth=5)(ped2_tokens), ped2_tokens).mean(0)
    assert (losses[1:] < losses[:-1]).all(), losses


def test_ut_starts_as_identity_and_has_symmetric_tied_attention(ped2_tokens):
    model = UT(depth=3)
    outputs = model(ped2_tokens)
    torch.testing.assert_close(outputs[0], ped2_tokens, atol=1e-3, rtol=0)  # E is D's right inverse (float32 solve)
    assert model.attention.shape == (256, 512)  # one projection, shared by queries, keys and every layer
    names = {name.split(".")[0] for name, _ in model.named_parameters()}
    assert names == {"decoder", "encoder", "attention", "weights", "biases"}


def test_ut_block_follows_its_equation(ped2_tokens):
    torch.manual_seed(1)
    model = UT(depth=1, attention_step=0.4, feedforward_init_std=0.05).double()
    x = ped2_tokens.double()
    codes = to_sequences(x) @ model.encoder
    queries = codes @ model.attention.T
    attended = 0.6 * codes + 0.4 * torch.softmax(queries @ queries.transpose(1, 2) / 256, dim=-1) @ codes
    weight = 0.5 * (model.weights[0] + model.weights[0].T)
    expected = attended - torch.relu(attended @ weight + model.biases[0]) @ weight
    torch.testing.assert_close(model(x)[1], from_sequences(expected @ model.decoder.T, x.shape[0]))


def test_symmetric_attention_rows_are_convex_combinations_of_symmetric_scores():
    """With one-hot tokens and step 1 the output is the attention matrix itself: rows are probability vectors,
    the softmax of scores that are symmetric because queries and keys share one projection."""
    tokens = torch.eye(6).expand(2, 6, 6)
    queries = torch.randn(2, 6, 4)
    weights = symmetric_attention(tokens, queries, step=1.0, scale=0.5)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 6))
    assert (weights >= 0).all()
    scores = weights.log() + torch.logsumexp(0.5 * queries @ queries.transpose(1, 2), dim=-1, keepdim=True)
    torch.testing.assert_close(scores, scores.transpose(1, 2), atol=1e-5, rtol=1e-5)
    halfway = symmetric_attention(tokens, queries, step=0.25, scale=0.5)
    torch.testing.assert_close(halfway, 0.75 * tokens + 0.25 * weights)


# each model at its yaml's primal lr (conf/model/<name>.yaml's lr): UT's 1e-3 moves its feed-forward weights, at
# initialisation of std 0.002, far past where they descend (l_0 0.33 -> 3.3 in the yaml's measurement)
@pytest.mark.parametrize("make_model, lr", [(lambda: DUST(depth=3), 1e-3),
                                            (lambda: DUST(depth=3, per_layer_dictionary=True), 1e-3),
                                            (lambda: UT(depth=3), 1e-4)])
@pytest.mark.parametrize("constrained", [False, True])
def test_contract_outputs_and_a_step_lowers_the_objective(make_model, lr, constrained, ped2_tokens):
    """Every model: L+1 outputs of the input's shape; a few steps on a fixed batch lower what they optimise."""
    torch.manual_seed(0)
    model = make_model()
    noisy = ped2_tokens + 0.05 * torch.randn_like(ped2_tokens)
    outputs = model(noisy)
    assert len(outputs) == model.depth + 1 and all(o.shape == noisy.shape for o in outputs)
    objective = DenoisingObjective()
    assert steps_on_a_fixed_batch(model, objective, noisy, ped2_tokens, constrained, lr=lr)[2]


def test_rmse_is_on_the_0_255_scale():
    clean = torch.zeros(1, 2, 3, 4)
    out = [clean + 10 / 255]
    _, sums, count = DenoisingObjective().evaluation_terms(out, clean)
    assert math.isclose(float(DenoisingObjective().metric_from_sums(sums, count)[0]), 10.0, rel_tol=1e-5)


def test_a_depth_whose_weights_cannot_fit_is_refused_in_one_line_before_building(tmp_path) -> None:
    """L=100000 of DUST built for minutes without a word (a power iteration per layer's dictionary), then filled the
    host's memory; 10^7 layers' float32 dictionaries (4.9 TiB) fit no machine. The address-space limit only keeps a
    build that is not refused (the code before this bound) from taking this shared machine's memory."""
    import resource
    import subprocess
    import sys

    from conftest import ROOT
    from helpers.contract import cutlab_env

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    runs = tmp_path / "runs"
    result = subprocess.run([sys.executable, "-m", "cutlab", "L=10000000", "threads=1", "wandb.mode=disabled"],
                            cwd=ROOT, env=cutlab_env(runs), preexec_fn=limit, capture_output=True, text=True,
                            timeout=120)
    message = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert message.startswith("cutlab: error: model=dust at L=10000000 has 1310.72 B parameters: its float32 "
                              "weights alone need 4882.8 GiB of host memory") and "; use L <= " in message, message
    assert not list(runs.glob("*/summary.json"))  # refused before a step: no run is recorded


def test_a_model_that_cannot_be_built_shallower_is_not_stopped_by_the_depth_bound() -> None:
    """The bound measures builds at L=1 and 2; a model of one's own that refuses those depths in its own way (here an
    assert) must still be built at the depth asked, not end in the probe's traceback."""
    from cutlab.tasks.depth_bound import check_depth_fits

    def deep_only(layers: int) -> torch.nn.Module:
        assert layers >= 3, "this model needs at least 3 layers"
        return torch.nn.Linear(layers, 1)

    check_depth_fits("deep_only", deep_only, depth=4)  # no error: the real build speaks for itself


@pytest.mark.parametrize("name, build", [("ut", UT), ("dust", DUST)])
def test_a_models_python_defaults_are_its_yamls_values(name, build):
    """What a run sets in conf/model/<name>.yaml is also what the class builds when a key is left out, so a model
    built in Python (a test, a benchmark) is the one runs train. DUST's per_layer_dictionary follows
    train.constrained in its yaml and is left out."""
    import inspect

    from cutlab.config.compose import compose_run_config

    model_cfg = compose_run_config([f"model={name}", "data=synthetic"]).model
    defaults = {key: parameter.default for key, parameter in inspect.signature(build).parameters.items()
                if parameter.default is not parameter.empty and key in model_cfg}
    defaults.pop("per_layer_dictionary", None)
    assert {"attention_step", "atoms"} <= set(defaults)
    assert defaults == {key: model_cfg[key] for key in defaults}
