"""The text models and the classification objective against their definitions, and the model contract."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import SHARED, require_shared
from helpers.contract import steps_on_a_fixed_batch

from cutlab.core.data.text import TokenizedText, classification_batch, token_embedding_std, tokenize
from cutlab.core.data.text_readers import read_imdb, read_mnli
from cutlab.core.models.hf_loading import load_model, load_tokenizer
from cutlab.core.models.text_encoder import EncoderClassifier
from cutlab.core.models.ut_text import UTTextClassifier, masked_symmetric_attention, mean_pool
from cutlab.core.objectives.classification import ClassificationObjective
from cutlab.core.perturbation import perturbed_forward

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
DISTILBERT = SHARED / "models" / "distilbert-base-uncased"
ROBERTA_TOKENIZER = SHARED / "models" / "roberta-base-tokenizer"
ROBERTA_BASE = dict(model_type="roberta", vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5,
                    pad_token_id=1, bos_token_id=0, eos_token_id=2)


def batch_of(tokenizer, examples, max_length=24):
    data = tokenize(examples, tokenizer, max_length, progress=False)
    return classification_batch(data.collate([data[i] for i in range(len(data))]))


@pytest.fixture(scope="module")
def imdb_examples():
    rows = read_imdb(str(require_shared(SHARED / "data" / "imdb")), "train", "imdb_train_tiny100.jsonl")
    return rows[:2] + rows[-2:]  # two negative, two positive real reviews


@pytest.fixture(scope="module")
def mnli_examples():
    return read_mnli(str(require_shared(SHARED / "data" / "mnli")), "train", "mnli_tiny.jsonl")[:4]


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return load_tokenizer(MINILM)


def make_minilm(tokenizer, examples):
    torch.manual_seed(0)
    return EncoderClassifier(load_model(MINILM, pretrained=True), 2), batch_of(tokenizer, examples)


def make_distilbert(_, mnli):
    torch.manual_seed(0)
    model = EncoderClassifier(load_model(str(require_shared(DISTILBERT)), pretrained=False), 3)
    return model, batch_of(load_tokenizer(str(DISTILBERT)), mnli)


def make_roberta(_, mnli):
    torch.manual_seed(0)
    model = EncoderClassifier(load_model(str(require_shared(ROBERTA_TOKENIZER)), False, dict(ROBERTA_BASE)), 3)
    return model, batch_of(load_tokenizer(str(ROBERTA_TOKENIZER)), mnli)


def make_ut_text(tokenizer, examples):
    torch.manual_seed(0)
    embeddings = load_model(MINILM, pretrained=True).get_input_embeddings().weight.detach()
    return UTTextClassifier(embeddings, depth=3, num_labels=2), batch_of(tokenizer, examples)


MODELS = {"minilm": (make_minilm, "imdb", 6), "distilbert": (make_distilbert, "mnli", 6),
          "roberta": (make_roberta, "mnli", 12), "ut_text": (make_ut_text, "imdb", 3)}


# the random-init DistilBERT (66 M) and RoBERTa (125 M) take tens of seconds on 2 shared cores: slow here,
# and covered by the end-to-end runs of tests/test_text_cli.py
PARAMS = [name if name in ("minilm", "ut_text") else pytest.param(name, marks=pytest.mark.slow) for name in MODELS]


@pytest.fixture(scope="module", params=PARAMS)
def built(request, minilm_tokenizer, imdb_examples, mnli_examples):
    make, data, depth = MODELS[request.param]
    model, (inputs, labels) = make(minilm_tokenizer, imdb_examples if data == "imdb" else mnli_examples)
    return request.param, model, inputs, labels, depth


def test_contract_shapes_depth_and_perturbation_point(built):
    """L+1 class-logit outputs; noise enters at the word embeddings of the token ids (inputs_embeds)."""
    name, model, inputs, labels, depth = built
    model.eval()
    outputs = model(inputs)
    classes = 2 if name in ("minilm", "ut_text") else 3
    assert model.depth == depth and len(outputs) == depth + 1
    assert all(out.shape == (len(labels), classes) for out in outputs)
    assert not torch.allclose(outputs[0], outputs[-1])
    table = model.embeddings.weight if name == "ut_text" else model.encoder.get_input_embeddings().weight
    torch.testing.assert_close(model.perturbable(inputs), table[inputs["input_ids"]])
    clean = perturbed_forward(model, inputs, 0.0, 1.0, 0.0, torch.Generator().manual_seed(0))
    noisy = perturbed_forward(model, inputs, 1.0, 0.05, 0.0, torch.Generator().manual_seed(0))
    torch.testing.assert_close(clean[-1], outputs[-1])
    assert not torch.allclose(noisy[-1], outputs[-1])


def test_padding_does_not_change_any_layer(built):
    """The attention mask keeps padded positions out: appending 5 padded columns changes no layer's output."""
    _, model, inputs, _, _ = built
    model.eval()
    pad_id = getattr(getattr(model, "encoder", None), "config", None)
    pad_id = pad_id.pad_token_id if pad_id is not None else 0
    fill = {"input_ids": pad_id, "attention_mask": 0, "token_type_ids": 0}
    padded = {key: torch.cat([value, torch.full((value.shape[0], 5), fill[key], dtype=value.dtype)], dim=1)
              for key, value in inputs.items()}
    with torch.no_grad():
        for plain, longer in zip(model(inputs), model(padded)):
            torch.testing.assert_close(plain, longer, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("constrained", [False, True])
def test_contract_a_step_lowers_the_objective_on_a_fixed_batch(built, constrained):
    name, model, inputs, labels, _ = built
    model.eval()  # dropout off: the same batch gives the same losses before and after
    initial = {key: value.clone() for key, value in model.state_dict().items()}
    objective = ClassificationObjective()
    lr = 1e-3 if name == "ut_text" else 1e-4
    _, _, lowered = steps_on_a_fixed_batch(model, objective, inputs, labels, constrained, lr=lr)
    model.load_state_dict(initial)  # the module-scoped model goes back for the next test
    assert lowered


def test_classification_objective_is_cross_entropy_and_accuracy():
    logits = [torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]]), torch.tensor([[0.0, 2.0], [0.0, 1.0], [1.0, 3.0]])]
    labels = torch.tensor([0, 1, 1])
    objective = ClassificationObjective()
    losses, correct, count = objective.evaluation_terms(logits, labels)
    assert losses.shape == (3, 2) and count == 3
    assert math.isclose(float(losses[0, 0]), math.log(1 + math.exp(-2.0)), rel_tol=1e-6)
    assert correct.tolist() == [2, 2]
    assert objective.metric_from_sums(correct.double(), count).tolist() == pytest.approx([2 / 3, 2 / 3])
    assert objective.higher_is_better and objective.metric_name == "accuracy"


def test_ut_text_block_follows_its_equation(minilm_tokenizer, imdb_examples):
    model, (inputs, _) = make_ut_text(minilm_tokenizer, imdb_examples)
    model = model.double()
    mask = inputs["attention_mask"]
    y = model.embeddings.weight[inputs["input_ids"]]
    q = y @ model.attention.T
    scores = (q @ q.transpose(1, 2)) / y.shape[-1] + torch.where(mask[:, None, :] > 0, 0.0, -torch.inf).double()
    z = 0.5 * y + 0.5 * torch.softmax(scores, dim=-1) @ y
    s = 0.5 * (model.weights[0] + model.weights[0].T)
    y1 = z - torch.relu(z @ s + model.biases[0]) @ s
    pooled = (y1 * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    torch.testing.assert_close(model(inputs)[1], model.readout(pooled))
    torch.testing.assert_close(mean_pool(y, mask)[0], y[0, : int(mask[0].sum())].mean(0))
    assert masked_symmetric_attention(y, q, mask, 0.0, 1.0).equal(y)  # step 0: the identity
    assert not model.embeddings.weight.requires_grad  # the pretrained embeddings stay fixed by default


def test_sigma_is_the_std_of_the_embedded_training_tokens(minilm_tokenizer, imdb_examples):
    data = tokenize(imdb_examples, minilm_tokenizer, 24, progress=False)
    table = torch.randn(len(minilm_tokenizer), 8, dtype=torch.float64) * 0.3 + 0.1
    direct = torch.cat([table[torch.tensor(ids)] for ids in data.encodings["input_ids"]]).std(unbiased=False)
    assert token_embedding_std(table, data.encodings["input_ids"]) == pytest.approx(float(direct), rel=1e-9)


def test_collate_pads_each_batch_to_its_longest_row():
    data = TokenizedText({"input_ids": [[5, 6, 7], [8]], "token_type_ids": [[0, 0, 1], [0]]}, [1, 0], pad_id=9)
    batch = data.collate([data[0], data[1]])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 9, 9]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 1], [0, 0, 0]] and batch["labels"].tolist() == [1, 0]
    assert data.collate([data[1]])["input_ids"].shape == (1, 1)


def test_truncated_encoder_keeps_the_first_blocks_exactly(minilm_tokenizer, imdb_examples):
    """model.truncate=true with L=3 on the 6-layer MiniLM: Phi_0..Phi_3 equal the full model's first four."""
    from cutlab.core.models.text_encoder import keep_first_layers

    full, (inputs, _) = make_minilm(minilm_tokenizer, imdb_examples)
    short = load_model(MINILM, pretrained=True)
    keep_first_layers(short, 3)
    truncated = EncoderClassifier(short, 2)
    truncated.readout.load_state_dict(full.readout.state_dict())
    full.eval(), truncated.eval()
    assert truncated.depth == 3
    with torch.no_grad():
        for a, b in zip(truncated(inputs), full(inputs)[:4], strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("model_type, pad_token_id", [("roberta", 1), ("bert", 0), ("distilbert", 0)])
def test_position_limit_is_the_longest_input_the_encoder_places(model_type, pad_token_id):
    """data.max_length is checked against it: past it a long enough text stopped a run with an index error."""
    small = dict(model_type=model_type, vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=16, max_position_embeddings=10, pad_token_id=pad_token_id,
                 dim=8, n_layers=1, n_heads=2, hidden_dim=16)  # DistilBERT names its sizes apart
    model = EncoderClassifier(load_model(str(require_shared(ROBERTA_TOKENIZER)), False, small), 2)
    limit = model.max_positions
    assert limit == (8 if model_type == "roberta" else 10)  # RoBERTa numbers positions from its pad id + 1
    for length in (limit, limit + 1):
        inputs = {"input_ids": torch.full((1, length), 5), "attention_mask": torch.ones(1, length, dtype=torch.long)}
        if length == limit:
            assert len(model(inputs)) == 2
        else:
            with pytest.raises((IndexError, RuntimeError)):
                model(inputs)


def test_model_roberta_builds_the_config_json_of_its_source_not_roberta_base(tmp_path):
    """roberta.yaml's roberta-base config, meant for a folder without config.json, was applied to every source: a
    RoBERTa of another size (RoBERTa-large's 24 layers) was rebuilt as roberta-base, and refused as 12 layers."""
    from transformers import RobertaConfig

    from cutlab.config.compose import compose_run_config
    from cutlab.tasks.models import instantiate_model

    source = tmp_path / "roberta-small"
    RobertaConfig(vocab_size=50265, hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=514, pad_token_id=1).save_pretrained(source)
    cfg = compose_run_config(["data=imdb", "model=roberta", f"model.source={source}", "model.pretrained=false", "L=3"])
    model = instantiate_model(cfg.model, depth=3, num_labels=2)
    assert (model.encoder.config.num_hidden_layers, model.encoder.config.hidden_size) == (3, 32)
    # a folder without config.json (only the tokenizer, as ../shared has) still gets roberta-base's
    cfg = compose_run_config(["data=imdb", "model=roberta", f"model.source={require_shared(ROBERTA_TOKENIZER)}",
                              "model.pretrained=false", "L=12"])
    assert instantiate_model(cfg.model, depth=12, num_labels=2).encoder.config.hidden_size == 768
