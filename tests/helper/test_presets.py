"""helper.presets: the architecture table, its parameter counts and the LlamaConfig built from it."""

from __future__ import annotations

import pytest

from helper.presets import INIT_STD, MODEL_PRESETS, REFERENCE_ARCHS, ModelArch, get_preset, llama_config


def test_llama_2_7b_has_the_published_6_74e9_parameters():
    # meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters
    assert get_preset("llama-2-7b").n_params == 6_738_415_616
    assert get_preset("llama-2-7b").head_dim == 128


def test_grouped_query_attention_shrinks_the_key_and_value_projections():
    mha = get_preset("llama-2-70b")
    as_mha = ModelArch(**{**mha.__dict__, "n_kv_heads": mha.n_heads})
    kv_saved = 2 * mha.hidden * (mha.n_heads - mha.n_kv_heads) * mha.head_dim * mha.n_layers
    assert as_mha.n_params - mha.n_params == kv_saved


def test_an_mpt_preset_ties_its_head_and_adds_a_learned_position_embedding():
    a = REFERENCE_ARCHS["mpt-7b"]
    assert a.family == "mpt" and a.intermediate == 4 * a.hidden
    block = 4 * a.hidden**2 + 2 * a.hidden * a.intermediate + 2 * a.hidden
    assert a.n_params == (a.vocab + a.max_seq_len) * a.hidden + a.n_layers * block + a.hidden
    assert a.n_params == pytest.approx(6_658_859_008, rel=1e-3)  # llm-foundry's NumParams for 7b


def test_an_unknown_preset_is_a_key_error_listing_the_known_ones():
    with pytest.raises(KeyError, match="llama-2-7b"):
        get_preset("llama-9")
    assert all(get_preset(name) is arch for name, arch in MODEL_PRESETS.items())


def test_the_llama_config_has_the_presets_shape_and_grows_to_fit_the_tokenizer():
    pytest.importorskip("transformers")
    arch = get_preset("tiny")
    cfg = llama_config(arch, seq_len=4096, vocab_size=9000, attention="eager")
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (2, 128, 4)
    assert cfg.vocab_size == 9000 and cfg.max_position_embeddings == 4096
    assert cfg.tie_word_embeddings is False and cfg.initializer_range == INIT_STD
    assert cfg._attn_implementation == "eager"
    assert llama_config(arch, seq_len=128, vocab_size=10).vocab_size == arch.vocab
