"""Data for trials: template, loading (synthetic, local files, the real code_alpaca set),
tokenizers, each padding mode's batches, DataLoader workers."""

import json
import random
from pathlib import Path

import pytest
import torch

from objectives.data import (
    IGNORE_INDEX,
    ExampleDataset,
    PackedDataset,
    TextTokenizer,
    build_dataloader,
    collate_rows,
    count_tokens,
    format_alpaca,
    iterate_batches,
    load_examples,
    load_tokenizer,
    synthetic_examples,
    tokenizer_cache_path,
)

CODE_ALPACA = Path(__file__).resolve().parents[3] / "shared" / "data" / "code_alpaca_2k" / "code_alpaca_2k.json"
needs_code_alpaca = pytest.mark.skipif(not CODE_ALPACA.exists(),
                                       reason=f"Code Alpaca sample (CC BY-NC, not shipped) absent: {CODE_ALPACA}")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    cfg = {"source": "synthetic", "num_examples": 300, "vocab_size": 500,
           "cache_dir": str(tmp_path_factory.mktemp("cache"))}
    return load_tokenizer(cfg, synthetic_examples(300))


def test_alpaca_template():
    with_input = format_alpaca({"instruction": "Add", "input": "1 2", "output": "3"})
    assert with_input == ("Below is an instruction that describes a task, paired with an input that provides "
                          "further context. Write a response that appropriately completes the request.\n\n"
                          "### Instruction:\nAdd\n\n### Input:\n1 2\n\n### Response:\n3")
    without = format_alpaca({"instruction": "Say hi", "input": "", "output": "hi"})
    assert "### Input" not in without and without.endswith("### Instruction:\nSay hi\n\n### Response:\nhi")


def test_synthetic_is_deterministic_with_a_length_spread():
    a, b = synthetic_examples(500), synthetic_examples(500)
    assert a == b and a != synthetic_examples(500, seed=4)
    assert load_examples({"source": "synthetic", "num_examples": 500}) == a   # a study constant
    lengths = sorted(len(e["output"].split()) for e in a)
    assert lengths[25] < 30 and lengths[-25] > 120        # 5th and 95th percentiles far apart
    assert 45 < lengths[250] < 80                          # median ~60 words (log-normal)
    assert 0.2 < sum(bool(e["input"]) for e in a) / 500 < 0.45


def test_trained_tokenizer_is_cached_and_reused(tmp_path):
    cfg = {"source": "synthetic", "num_examples": 200, "vocab_size": 400, "cache_dir": str(tmp_path)}
    first = load_tokenizer(cfg, synthetic_examples(200))
    assert list(tmp_path.glob("bpe-*.json")) == [tokenizer_cache_path(cfg)]
    again = load_tokenizer(cfg, [], is_writer=False)      # no examples needed: read from cache
    text = format_alpaca(synthetic_examples(1)[0])
    assert first.encode(text) == again.encode(text) and first.vocab_size <= 400
    sent = TextTokenizer.from_json(first.to_json())                   # how rank 0 shares it with the others
    assert sent.encode(text) == first.encode(text) and (sent.eos_id, sent.pad_id) == (first.eos_id, first.pad_id)
    assert tokenizer_cache_path({**cfg, "vocab_size": 300}) != tokenizer_cache_path(cfg)
    with pytest.raises(FileNotFoundError, match="rank 0 trains it first"):
        load_tokenizer({**cfg, "vocab_size": 300}, [], is_writer=False)


def test_cache_key_follows_a_local_files_content(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"instruction": "a", "output": "b"}))
    cfg = {"source": str(data), "cache_dir": str(tmp_path)}
    before = tokenizer_cache_path(cfg)
    data.write_text(json.dumps({"instruction": "a longer one", "output": "b"}))
    assert tokenizer_cache_path(cfg) != before


def test_hf_tokenizer_from_a_local_path(tmp_path, tokenizer):
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend, eos_token="</s>", pad_token="<pad>")
    hf.save_pretrained(tmp_path / "tok")
    loaded = load_tokenizer({"tokenizer": str(tmp_path / "tok")}, [])
    assert (loaded.eos_id, loaded.pad_id, loaded.vocab_size) == (tokenizer.eos_id, tokenizer.pad_id, tokenizer.vocab_size)
    assert loaded.encode("def sort(list)") == tokenizer.encode("def sort(list)")


@pytest.mark.parametrize("padding,width", [("max_length", 16), ("longest", 5)])
def test_padding_modes_shapes_and_counts(tokenizer, padding, width):
    rows = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14]]
    batch = collate_rows(rows, pad_id=tokenizer.pad_id, seq_len=16, padding=padding)
    assert batch["input_ids"].shape == batch["labels"].shape == (3, width)
    assert count_tokens(batch) == 10 == int((batch["labels"] != IGNORE_INDEX).sum())
    pad = batch["attention_mask"] == 0
    assert torch.all(batch["input_ids"][pad] == tokenizer.pad_id) and torch.all(batch["labels"][pad] == IGNORE_INDEX)
    assert batch["labels"][2].tolist()[:5] == rows[2]


def test_example_rows_end_with_eos_and_respect_seq_len(tokenizer):
    examples = synthetic_examples(100)
    ds = ExampleDataset(examples, tokenizer, 64)
    lengths = [len(ds[i]) for i in range(100)]
    assert max(lengths) == 64 and min(lengths) < 64                    # long ones truncated
    short = next(i for i in range(100) if lengths[i] < 64)
    assert ds[short] == tokenizer.encode(format_alpaca(examples[short])) + [tokenizer.eos_id]


def test_packing_fills_rows_without_padding(tokenizer):
    examples = synthetic_examples(50)
    rows = [r for _, r in zip(range(10), PackedDataset(examples, tokenizer, 64, seed=7))]
    order = list(range(50))
    random.Random(7).shuffle(order)          # one rank, one worker: the whole seeded order
    stream = []
    for i in order:
        stream += tokenizer.encode(format_alpaca(examples[i])) + [tokenizer.eos_id]
    assert rows == [stream[k * 64:(k + 1) * 64] for k in range(10)]


@pytest.mark.parametrize("padding", ["max_length", "longest", "packed"])
def test_dataloader_with_workers_and_prefetch(tokenizer, padding):
    loader = build_dataloader(synthetic_examples(64), tokenizer, seq_len=32, micro_batch=4,
                              padding=padding, num_workers=2, prefetch_factor=2, rank=1, world_size=2)
    batches = [b for _, b in zip(range(12), iterate_batches(loader))]   # 64/2/4 = 8 per epoch: wraps
    for b in batches:
        rows, width = b["input_ids"].shape
        assert rows == 4 and width <= 32 and (width == 32 or padding == "longest")
        if padding == "packed":
            assert count_tokens(b) == 4 * 32 and torch.all(b["labels"] != IGNORE_INDEX)
        if padding == "longest":
            assert int(b["attention_mask"].sum(1).max()) == width     # the longest row sets the width
    serial = build_dataloader(synthetic_examples(64), tokenizer, seq_len=32, micro_batch=4, padding=padding,
                              num_workers=0, prefetch_factor=None, rank=1, world_size=2)
    if padding != "packed":                 # map-style order does not depend on the worker count
        assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(batches, iterate_batches(serial)))


def test_epochs_are_reshuffled_and_ranks_disjoint(tokenizer):
    examples = synthetic_examples(16)
    loaders = [build_dataloader(examples, tokenizer, seq_len=64, micro_batch=2, padding="longest", num_workers=0,
                                prefetch_factor=None, rank=r, world_size=2, seed=3) for r in (0, 1)]
    epochs = [[b["input_ids"].tolist() for _, b in zip(range(8), iterate_batches(loader))] for loader in loaders]
    assert epochs[0][:4] != epochs[0][4:]                              # epoch 2 is another order
    firsts = [{tuple(r) for batch in e[:4] for r in batch} for e in epochs]
    assert not firsts[0] & firsts[1]                                   # each rank its own share


def test_bad_knob_combinations_are_refused(tokenizer):
    with pytest.raises(ValueError, match="prefetch_factor needs num_workers"):
        build_dataloader([], tokenizer, seq_len=8, micro_batch=1, padding="packed", num_workers=0, prefetch_factor=2)
    with pytest.raises(ValueError, match="do not fill one micro-batch"):
        build_dataloader(synthetic_examples(6), tokenizer, seq_len=8, micro_batch=4, padding="longest",
                         num_workers=0, prefetch_factor=None, world_size=2)


def test_local_jsonl_and_parquet(tmp_path):
    records = [{"instruction": f"task {i}", "input": "", "output": f"answer {i}"} for i in range(5)]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in records))
    assert load_examples({"source": str(jsonl)}) == records
    import datasets
    parquet = tmp_path / "d.parquet"
    datasets.Dataset.from_list(records).to_parquet(str(parquet))
    assert load_examples({"source": str(parquet), "num_examples": 3}) == records[:3]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "no alpaca fields"}))
    with pytest.raises(ValueError, match="lack"):
        load_examples({"source": str(bad)})
    with pytest.raises(ValueError, match="data.template 'chatml'"):
        load_examples({"source": str(jsonl), "template": "chatml"})


@needs_code_alpaca
def test_real_code_alpaca_from_local_json(tmp_path):
    examples = load_examples({"source": str(CODE_ALPACA)})
    assert len(examples) == 2017 and all(e["instruction"] for e in examples)
    assert 0.2 < sum(bool(e["input"]) for e in examples) / len(examples) < 0.8
    tok = load_tokenizer({"source": str(CODE_ALPACA), "num_examples": 0, "vocab_size": 2000,
                          "cache_dir": str(tmp_path)}, examples)
    loader = build_dataloader(examples, tok, seq_len=256, micro_batch=8, padding="max_length",
                              num_workers=0, prefetch_factor=None)
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (8, 256)
    assert 0.1 < count_tokens(batch) / (8 * 256) < 0.9   # short examples: padding wastes much of each row
