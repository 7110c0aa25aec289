"""Models for trials: presets on meta with the table's parameter count, materialising, local paths."""

import pytest
import torch

from helper.presets import MODEL_PRESETS
from objectives.models import build_model, count_params, load_pretrained, materialize


@pytest.mark.parametrize("preset", sorted(MODEL_PRESETS))
def test_presets_build_on_meta_with_the_tables_parameter_count(preset):
    model = build_model({"preset": preset, "seq_len": 128})
    assert all(p.is_meta for p in model.parameters())               # no storage: a 70B costs nothing
    assert count_params(model) == MODEL_PRESETS[preset].n_params


def test_vocabulary_grows_to_fit_the_tokenizer_and_bad_presets_are_named():
    arch = MODEL_PRESETS["tiny"]
    model = build_model({"preset": "tiny", "seq_len": 64}, vocab_size=arch.vocab + 100)
    assert model.config.vocab_size == arch.vocab + 100
    assert count_params(model) == arch.n_params + 2 * 100 * arch.hidden   # embedding + untied head
    with pytest.raises(ValueError, match="model.preset.*unknown model preset 'llama-9z'"):
        build_model({"preset": "llama-9z", "seq_len": 64})


def test_tiny_materializes_and_trains_a_step():
    model = build_model({"preset": "tiny", "seq_len": 64})
    materialize(model, torch.device("cpu"), seed=1)
    assert not any(p.is_meta for p in model.parameters())
    assert torch.all(model.model.norm.weight == 1.0)                  # RMSNorm starts at ones
    assert 0.015 < float(model.model.embed_tokens.weight.detach().std()) < 0.025
    ids = torch.randint(0, 8000, (2, 32))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss) and 8.0 < loss.item() < 10.0            # ~ln(8000) at random init
    again = build_model({"preset": "tiny", "seq_len": 64})
    materialize(again, torch.device("cpu"), seed=1)
    assert torch.equal(again.lm_head.weight, model.lm_head.weight)    # seeded: repeatable


@pytest.fixture()
def saved_checkpoint(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    saved = LlamaForCausalLM(cfg)
    saved.save_pretrained(tmp_path)
    return tmp_path, saved


def test_local_path_builds_on_meta_then_loads_the_real_weights(saved_checkpoint):
    path, saved = saved_checkpoint
    model = build_model({"path": str(path), "seq_len": 64})
    assert all(p.is_meta for p in model.parameters()) and count_params(model) == count_params(saved)
    materialize(model, torch.device("cpu"))
    load_pretrained(model, str(path))
    for (name, got), (_, want) in zip(model.state_dict().items(), saved.state_dict().items()):
        assert torch.equal(got, want), name
    ids = torch.randint(0, 512, (1, 16))
    assert torch.allclose(model(input_ids=ids).logits, saved(input_ids=ids).logits, atol=1e-5)  # rotary rebuilt


def test_local_path_refuses_a_tokenizer_larger_than_its_vocabulary(saved_checkpoint):
    path, _ = saved_checkpoint
    with pytest.raises(ValueError, match="vocabulary 512 is smaller than the tokenizer's 8000"):
        build_model({"path": str(path), "seq_len": 64}, vocab_size=8000)
