"""Model and dataset sizes: ``7e9``, ``"7b"``, ``"13B"``, ``"1.3b"``, a preset name, ``"52k"``.

A model size becomes a :class:`ModelShape`: the parameter count the user gave plus a
Llama-shaped architecture (layers, hidden, heads, vocabulary) that the activation-memory and
FLOP formulas need. A size within :data:`PRESET_MATCH_TOLERANCE` of a preset borrows that
preset's shape (``"7b"`` -> llama-2-7b's 32 x 4096) but keeps exactly the count given
(7e9, so static memory is exactly 16 B x 7e9 = 112 GB); any other size gets a scaled Llama
shape (see :func:`scaled_llama_arch`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from helper.presets import MODEL_PRESETS, REFERENCE_ARCHS, ModelArch

__all__ = ["ModelShape", "parse_model_size", "parse_dataset_size", "scaled_llama_arch",
           "PRESET_MATCH_TOLERANCE"]

PRESET_MATCH_TOLERANCE = 0.05
"""A bare size borrows a preset's shape when their parameter counts differ by at most 5 %."""

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)

# Llama 2's shapes keep head_dim 128 and hidden ~ 128 x layers (4096/32, 5120/40); with
# 12 h^2 parameters per SwiGLU block (4 h^2 attention + 3 h (8h/3) MLP), N ~ 12 L h^2 gives
# L ~ (N / (12 * 128^2))^(1/3). Source: the presets' config.json files (helper/presets.py).
_HIDDEN_PER_LAYER = 128
_SCALED_VOCAB = 32000  # Llama 2 tokenizer


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """A parameter count and the architecture used for its activations and FLOPs."""

    n_params: float
    """Parameter count used for static memory and 6N FLOPs (exactly what the user gave)."""
    arch: ModelArch
    """Layers, hidden, heads, vocabulary: a preset, or a scaled Llama shape."""
    label: str
    """Human-readable name: a preset's (``llama-2-7b``), or the count given with the shape it borrows
    (``7b (llama-2-7b shape)``: 7e9 parameters, not llama-2-7b's 6.74e9), or ``llama-like-1.3b``."""
    note: str
    """How the shape was chosen (printed by ``explain``)."""

    @property
    def n_embedding_params(self) -> float:
        """Input-embedding parameters (excluded from FLOPs: a lookup, not a matmul).

        MPT ties the token embedding to the output head (a matmul): only its learned
        position embedding is a pure lookup."""
        if self.arch.family == "mpt":
            return float(self.arch.max_seq_len * self.arch.hidden)
        return float(self.arch.vocab * self.arch.hidden)

    @property
    def _root_params_arch(self) -> float:
        a = self.arch
        if a.family == "mpt":
            return float((a.vocab + a.max_seq_len) * a.hidden + a.hidden)
        return 2.0 * a.vocab * a.hidden + a.hidden

    @property
    def block_params(self) -> float:
        """Parameters of one transformer block (FSDP2 shards and gathers per block)."""
        return max(self.n_params - self._root_params_arch, 0.0) / self.arch.n_layers

    @property
    def root_params(self) -> float:
        """Embedding, final norm and output head: the root FSDP unit."""
        return min(self.n_params, self._root_params_arch)


def _round_to(x: float, multiple: int) -> int:
    return max(multiple, int(round(x / multiple)) * multiple)


def scaled_llama_arch(n_params: float, *, vocab: int = _SCALED_VOCAB) -> ModelArch:
    """A Llama-2-style architecture with about ``n_params`` parameters.

    Layers follow Llama 2's aspect ratio (hidden ~ 128 x layers); hidden then solves
    ``12 L h^2 + 2 V h = N`` and is rounded to a multiple of 64; SwiGLU width ~ 8h/3
    rounded to 256; heads of 128 (64 below hidden 1024).

    Example:
        >>> a = scaled_llama_arch(1.3e9)
        >>> a.n_layers, a.hidden, a.n_heads
        (19, 2304, 18)
    """
    if n_params <= 0:
        raise ValueError(f"model size must be positive, got {n_params!r}")
    layers = max(2, int(round((n_params / (12 * _HIDDEN_PER_LAYER**2)) ** (1 / 3))))
    # 12 L h^2 + 2 V h - N = 0
    a, b, c = 12.0 * layers, 2.0 * vocab, -float(n_params)
    hidden = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    hidden = _round_to(hidden, 64)
    head_dim = 128 if hidden >= 1024 else 64
    hidden = _round_to(hidden, head_dim)
    heads = hidden // head_dim
    return ModelArch(name=f"llama-like-{_fmt_params(n_params)}", n_layers=layers, hidden=hidden,
                     n_heads=heads, n_kv_heads=heads, intermediate=_round_to(8 * hidden / 3, 256),
                     vocab=vocab, max_seq_len=4096)


def _fmt_params(n: float) -> str:
    for unit, div in (("t", 1e12), ("b", 1e9), ("m", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.0f}"


def parse_model_size(model_size: float | int | str | ModelShape) -> ModelShape:
    """A :class:`ModelShape` from ``7e9``, ``"7b"``, ``"13B"``, ``"1.3b"`` or a preset name.

    Args:
        model_size: a parameter count (number, or string with a k/m/b/t suffix), or a preset
            name of :mod:`helper.presets` (``llama-2-7b``...), or a ``ModelShape`` (returned).

    Raises:
        ValueError: the text is neither a size nor a known preset.

    Example:
        >>> s = parse_model_size("7b")
        >>> s.n_params, s.arch.name
        (7000000000.0, 'llama-2-7b')
        >>> parse_model_size("llama-2-13b").n_params == parse_model_size("llama-2-13b").arch.n_params
        True
    """
    if isinstance(model_size, ModelShape):
        return model_size
    if isinstance(model_size, str):
        key = model_size.strip().lower()
        for name, arch in {**MODEL_PRESETS, **REFERENCE_ARCHS}.items():
            if name.lower() == key:
                return ModelShape(n_params=float(arch.n_params), arch=arch, label=name,
                                  note=f"preset {name} ({arch.n_params / 1e9:.3g}e9 params)")
        m = _SIZE_RE.match(key.replace("_", ""))
        if not m:
            raise ValueError(
                f"model size {model_size!r} is not a size (7e9, '7b', '13B', '1.3b') nor a "
                f"preset ({', '.join(MODEL_PRESETS)})")
        n = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    elif isinstance(model_size, (int, float)) and not isinstance(model_size, bool):
        n = float(model_size)
    else:
        raise ValueError(f"model size must be a number or a string, got {model_size!r}")
    if not math.isfinite(n) or n < 1e5:
        raise ValueError(f"model size {model_size!r} is not a plausible parameter count (>= 1e5)")
    best = min(MODEL_PRESETS.values(), key=lambda a: abs(a.n_params - n) / n)
    rel = abs(best.n_params - n) / n
    if rel <= PRESET_MATCH_TOLERANCE:
        # Labelled by the count given, not the preset's name: "7b" is 7e9 parameters, llama-2-7b is 6.74e9.
        return ModelShape(n_params=n, arch=best, label=f"{_fmt_params(n)} ({best.name} shape)",
                          note=f"{_fmt_params(n)} params with the shape of preset {best.name} "
                               f"({best.n_params / 1e9:.3g}e9 params, {rel:.1%} away)")
    arch = scaled_llama_arch(n)
    return ModelShape(n_params=n, arch=arch, label=arch.name,
                      note=f"{_fmt_params(n)} params, no preset within {PRESET_MATCH_TOLERANCE:.0%}: "
                           f"scaled Llama shape {arch.n_layers} layers x {arch.hidden} hidden")


def parse_dataset_size(dataset_size: int | float | str) -> int:
    """Examples in a dataset: ``52000``, ``"52k"``, ``"1.2M"``, ``"52_000"``.

    Example:
        >>> parse_dataset_size("52k"), parse_dataset_size(1e6)
        (52000, 1000000)
    """
    if isinstance(dataset_size, bool):
        raise ValueError(f"dataset size must be a count, got {dataset_size!r}")
    if isinstance(dataset_size, (int, float)):
        n = float(dataset_size)
    elif isinstance(dataset_size, str):
        m = _SIZE_RE.match(dataset_size.strip().replace("_", "").replace(",", ""))
        if not m:
            raise ValueError(f"dataset size {dataset_size!r} is not a count (52000, '52k', '1.2M')")
        n = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    else:
        raise ValueError(f"dataset size must be a number or a string, got {dataset_size!r}")
    if not math.isfinite(n) or n < 1:
        raise ValueError(f"dataset size must be at least 1 example, got {dataset_size!r}")
    return int(round(n))
