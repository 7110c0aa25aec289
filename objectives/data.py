"""Instruction data for trials: loading, the Alpaca template, tokenizers, batching.

Tokenization happens inside the DataLoader's workers (the datasets below tokenize on
access), which is what makes `num_workers` and `prefetch_factor` matter. How rows are
formed is the `padding` knob:

- `max_length`: one example per row, padded to seq_len (what many fine-tuning scripts do);
- `longest`: one example per row, padded to the longest row of the micro-batch;
- `packed`: examples concatenated with EOS into full seq_len rows, no padding (attention
  crosses example boundaries, as in common packing implementations).

Padding tokens carry label -100 and are never counted as tokens.

The data set itself is a study constant (synthetic data uses a fixed seed, so every trial
sees the same examples and the tokenizer cache is shared); the trial seed only orders it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

__all__ = [
    "load_examples", "format_alpaca", "synthetic_examples", "load_tokenizer", "tokenizer_cache_path",
    "TextTokenizer", "ExampleDataset", "PackedDataset", "collate_rows", "build_dataloader",
    "iterate_batches", "count_tokens", "PADDING_MODES", "IGNORE_INDEX", "SYNTHETIC_SEED",
]

IGNORE_INDEX = -100
"""Label of positions without loss: the default ignore_index of PyTorch's cross_entropy."""
PADDING_MODES = ("max_length", "longest", "packed")
SYNTHETIC_SEED = 0
"""Seed of the synthetic data set: fixed, so all trials of a study see the same data."""
TEMPLATES = ("alpaca",)

# Stanford Alpaca's prompt template (github.com/tatsu-lab/stanford_alpaca, train.py).
_PROMPT_INPUT = ("Below is an instruction that describes a task, paired with an input that provides "
                 "further context. Write a response that appropriately completes the request.\n\n"
                 "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
_PROMPT_NO_INPUT = ("Below is an instruction that describes a task. Write a response that "
                    "appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")


def format_alpaca(example: Mapping[str, Any]) -> str:
    """Prompt and response as one training text.

    Example:
        >>> format_alpaca({"instruction": "Say hi", "input": "", "output": "hi"}).endswith("### Response:\\nhi")
        True
    """
    template = _PROMPT_INPUT if example.get("input") else _PROMPT_NO_INPUT
    prompt = template.format(instruction=example.get("instruction", ""), input=example.get("input", ""))
    return prompt + str(example.get("output", ""))


# ------------------------------------------------------------------------------ loading

_WORDS = ("data model function value list string number return write create find sort "
          "compute given input output python code array table query user file test loop "
          "class method result error check print first last each time into from with").split()


def synthetic_examples(n: int, *, seed: int = SYNTHETIC_SEED) -> list[dict[str, str]]:
    """Deterministic instruction-like examples with a realistic length spread.

    Response lengths are log-normal (median ~60 words, log-sd 0.7), the long right tail of
    real instruction data; instructions are 6-25 words, a third of examples have an input.
    """
    rng = random.Random(seed)

    def words(k: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(k))

    out = []
    for _ in range(n):
        n_out = max(3, min(600, int(rng.lognormvariate(math.log(60), 0.7))))
        out.append({"instruction": words(rng.randint(6, 25)).capitalize() + ".",
                    "input": words(rng.randint(5, 40)) if rng.random() < 1 / 3 else "",
                    "output": words(n_out)})
    return out


def load_examples(data_cfg: Mapping[str, Any]) -> list[dict[str, str]]:
    """The spec's [data] source as a list of {instruction, input, output}.

    `synthetic`; a local .json / .jsonl / .parquet file (``datasets.load_dataset("json" or
    "parquet", data_files=...)``); or a hub dataset name (``datasets.load_dataset(name,
    split=...)``, which needs network or a local HF cache). ``num_examples`` 0 means all.

    Raises:
        ValueError: an unknown template, or records without the Alpaca fields.
    """
    template = data_cfg.get("template", "alpaca")
    if template not in TEMPLATES:
        raise ValueError(f"data.template {template!r}: known templates are {', '.join(TEMPLATES)}")
    source = str(data_cfg.get("source", "synthetic"))
    limit = int(data_cfg.get("num_examples", 0) or 0)
    if source == "synthetic":
        return synthetic_examples(limit or 2000)
    import datasets

    path = Path(source)
    if path.suffix in (".json", ".jsonl"):
        ds = datasets.load_dataset("json", data_files=str(path), split="train")
    elif path.suffix == ".parquet":
        ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
    else:
        ds = datasets.load_dataset(source, split=data_cfg.get("split", "train"))
    missing = {"instruction", "output"} - set(ds.column_names)
    if missing:
        raise ValueError(f"data.source {source}: records lack {sorted(missing)} "
                         "(the Alpaca fields are instruction, input, output)")
    if limit:
        ds = ds.select(range(min(limit, len(ds))))
    return [{"instruction": r["instruction"], "input": r.get("input") or "", "output": r["output"]} for r in ds]


# ---------------------------------------------------------------------------- tokenizers

class TextTokenizer:
    """The few things batching needs from a tokenizer, over HF or `tokenizers` objects.

    Picklable (both backends are), so each DataLoader worker gets its own copy.
    """

    def __init__(self, backend: Any, *, eos_id: int, pad_id: int, vocab_size: int) -> None:
        self.backend, self.eos_id, self.pad_id, self.vocab_size = backend, eos_id, pad_id, vocab_size

    def encode(self, text: str) -> list[int]:
        enc = self.backend.encode(text)
        return list(enc.ids) if hasattr(enc, "ids") else list(enc)

    def to_json(self) -> str:
        """A trained (`tokenizers`) tokenizer as JSON, to send to other ranks."""
        return self.backend.to_str()

    @classmethod
    def from_json(cls, text: str) -> TextTokenizer:
        """The inverse of :meth:`to_json`."""
        from tokenizers import Tokenizer

        return cls.wrap(Tokenizer.from_str(text))

    @classmethod
    def wrap(cls, tok: Any) -> TextTokenizer:
        return cls(tok, eos_id=tok.token_to_id("</s>"), pad_id=tok.token_to_id("<pad>"), vocab_size=tok.get_vocab_size())


class _HFEncoder:
    def __init__(self, hf: Any) -> None:
        self.hf = hf

    def encode(self, text: str) -> list[int]:
        return self.hf(text, add_special_tokens=True)["input_ids"]


def _train_bpe(texts: Sequence[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def tokenizer_cache_path(data_cfg: Mapping[str, Any]) -> Path:
    """Where the `train` tokenizer of this data lives: keyed by source, size and vocabulary.

    A local file's size and modification time are part of the key, so an edited file gets a
    fresh tokenizer.
    """
    source = str(data_cfg.get("source", "synthetic"))
    stamp = None
    if Path(source).is_file():
        st = Path(source).stat()
        stamp = [st.st_size, st.st_mtime_ns]
    key_fields = [source, stamp, int(data_cfg.get("num_examples", 0) or 0),
                  int(data_cfg.get("vocab_size", 8000)), data_cfg.get("template", "alpaca")]
    key = hashlib.sha256(json.dumps(key_fields).encode()).hexdigest()[:16]
    return Path(data_cfg.get("cache_dir") or ".tuner_cache") / f"bpe-{key}.json"


def load_tokenizer(data_cfg: Mapping[str, Any], examples: Sequence[Mapping[str, str]], *,
                   is_writer: bool = True) -> TextTokenizer:
    """An HF tokenizer (local path or hub name), or `train`: a byte-level BPE trained on the data.

    The trained tokenizer is cached (:func:`tokenizer_cache_path`); only the writer (rank 0)
    trains and saves it, atomically (write then rename), so readers never see half a file
    and concurrent trials can share the cache.

    Raises:
        FileNotFoundError: a reader found no cached tokenizer (rank 0 must train it first).
    """
    name = data_cfg.get("tokenizer", "train")
    if name != "train":
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(name)
        eos = hf.eos_token_id if hf.eos_token_id is not None else 0
        pad = hf.pad_token_id if hf.pad_token_id is not None else eos  # labels mask padding anyway
        return TextTokenizer(_HFEncoder(hf), eos_id=eos, pad_id=pad, vocab_size=len(hf))
    from tokenizers import Tokenizer

    cache = tokenizer_cache_path(data_cfg)
    if not cache.exists():
        if not is_writer:
            raise FileNotFoundError(f"tokenizer cache {cache} missing (rank 0 trains it first)")
        tok = _train_bpe([format_alpaca(e) for e in examples], int(data_cfg.get("vocab_size", 8000)))
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".tmp{os.getpid()}")
        tok.save(str(tmp))
        os.replace(tmp, cache)
    return TextTokenizer.wrap(Tokenizer.from_file(str(cache)))


# ------------------------------------------------------------------------------ datasets

class ExampleDataset(Dataset):
    """One example per row, tokenized on access (in the DataLoader worker), EOS, truncated."""

    def __init__(self, examples: Sequence[Mapping[str, str]], tokenizer: TextTokenizer, seq_len: int) -> None:
        self.examples, self.tokenizer, self.seq_len = examples, tokenizer, seq_len

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> list[int]:
        ids = self.tokenizer.encode(format_alpaca(self.examples[i])) + [self.tokenizer.eos_id]
        return ids[: self.seq_len]


class PackedDataset(IterableDataset):
    """Examples concatenated with EOS into full seq_len rows; tokenized in the workers.

    Each (rank, worker) takes its own shard of a seeded permutation, epoch after epoch,
    forever; with several workers the DataLoader interleaves them in a fixed order.
    """

    def __init__(self, examples: Sequence[Mapping[str, str]], tokenizer: TextTokenizer, seq_len: int,
                 *, rank: int = 0, world_size: int = 1, seed: int = 0) -> None:
        self.examples, self.tokenizer, self.seq_len = examples, tokenizer, seq_len
        self.rank, self.world_size, self.seed = rank, world_size, seed

    def __iter__(self) -> Iterator[list[int]]:
        info = get_worker_info()
        worker, n_workers = (info.id, info.num_workers) if info else (0, 1)
        shard, n_shards = self.rank * n_workers + worker, self.world_size * n_workers
        if n_shards > len(self.examples):
            raise ValueError(f"{len(self.examples)} examples cannot feed {n_shards} rank x worker shards")
        buffer: list[int] = []
        epoch = 0
        while True:
            order = list(range(len(self.examples)))
            random.Random(self.seed + epoch).shuffle(order)
            for i in order[shard::n_shards]:
                buffer += self.tokenizer.encode(format_alpaca(self.examples[i])) + [self.tokenizer.eos_id]
                while len(buffer) >= self.seq_len:
                    yield buffer[: self.seq_len]
                    buffer = buffer[self.seq_len:]
            epoch += 1


def collate_rows(rows: Sequence[Sequence[int]], *, pad_id: int, seq_len: int, padding: str) -> dict[str, torch.Tensor]:
    """Rows to tensors: padded to seq_len (`max_length`) or to the longest row (`longest`,
    `packed`, whose rows are all seq_len). Labels are the ids, -100 on padding (the model
    shifts them)."""
    width = seq_len if padding == "max_length" else max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for j, row in enumerate(rows):
        input_ids[j, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[j, : len(row)] = 1
    labels = input_ids.masked_fill(mask == 0, IGNORE_INDEX)
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


class _Collate:  # a class, not a lambda: DataLoader workers must pickle it
    def __init__(self, pad_id: int, seq_len: int, padding: str) -> None:
        self.pad_id, self.seq_len, self.padding = pad_id, seq_len, padding

    def __call__(self, rows):
        return collate_rows(rows, pad_id=self.pad_id, seq_len=self.seq_len, padding=self.padding)


def count_tokens(batch: Mapping[str, torch.Tensor]) -> int:
    """Non-padding tokens of a batch (what tokens/s counts)."""
    return int(batch["attention_mask"].sum())


def build_dataloader(examples: Sequence[Mapping[str, str]], tokenizer: TextTokenizer, *, seq_len: int,
                     micro_batch: int, padding: str, num_workers: int, prefetch_factor: int | None,
                     rank: int = 0, world_size: int = 1, seed: int = 0, pin_memory: bool = False) -> DataLoader:
    """The trial's DataLoader, built from the knobs; iterate it with :func:`iterate_batches`.

    Map-style (`max_length`, `longest`): a DistributedSampler gives each rank its share of a
    seeded permutation; incomplete micro-batches are dropped. `packed`: see PackedDataset.

    Example:
        >>> tok = TextTokenizer(None, eos_id=1, pad_id=0, vocab_size=2)
        >>> build_dataloader([], tok, seq_len=8, micro_batch=1, padding="ragged", num_workers=0,
        ...                  prefetch_factor=None)
        Traceback (most recent call last):
        ValueError: unknown padding 'ragged'; one of max_length, longest, packed
    """
    if padding not in PADDING_MODES:
        raise ValueError(f"unknown padding {padding!r}; one of {', '.join(PADDING_MODES)}")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError("prefetch_factor needs num_workers > 0")
    extra: dict[str, Any] = {"pin_memory": pin_memory}
    if num_workers > 0:  # workers live across epochs, as in a real run
        extra.update(prefetch_factor=prefetch_factor, persistent_workers=True)
    collate = _Collate(tokenizer.pad_id, seq_len, padding)
    if padding == "packed":
        dataset = PackedDataset(examples, tokenizer, seq_len, rank=rank, world_size=world_size, seed=seed)
        return DataLoader(dataset, batch_size=micro_batch, num_workers=num_workers, collate_fn=collate, **extra)
    from torch.utils.data.distributed import DistributedSampler

    dataset = ExampleDataset(examples, tokenizer, seq_len)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
    if len(sampler) < micro_batch:
        raise ValueError(f"{len(examples)} examples over {world_size} ranks do not fill one micro-batch of "
                         f"{micro_batch} (data.num_examples too small)")
    return DataLoader(dataset, batch_size=micro_batch, sampler=sampler, num_workers=num_workers,
                      collate_fn=collate, drop_last=True, **extra)


def iterate_batches(loader: DataLoader) -> Iterator[dict[str, torch.Tensor]]:
    """The loader's batches forever: epoch after epoch, reshuffled (``set_epoch``) each time."""
    epoch = 0
    while True:
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        yield from loader
        epoch += 1
