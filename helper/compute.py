"""Compute time of one step: FLOPs split into weight matmuls and attention, each at its own efficiency.

FLOPs per token are 6 N over the matmul parameters (Kaplan et al. 2020, Sec. 2.1; the input
embedding is a lookup, excluded as in torchtitan's ``get_nparams_and_flops``) plus attention
scores, 12 L H T in PaLM's count (Chowdhery et al. 2022, App. B), of which causal flash
attention executes half. Full checkpointing repeats the forward (8 N); selective repeats the
attention core only.
"""

from __future__ import annotations

from helper.sizes import ModelShape
from helper.step import StepPlan

__all__ = ["flops_per_token", "matmul_and_attention_flops", "compute_seconds"]

# Eager attention materialises the s x s scores: per score element, forward writes the bf16
# QK^T (2), the masked copy (2 + 2 read), the fp32 softmax (2 read + 4 write) and its bf16
# cast (4 read + 2 write); backward reads and writes about twice that. A count, ~54 B.
_EAGER_BYTES_PER_SCORE = 54.0


def matmul_and_attention_flops(shape: ModelShape, seq_len: int, *,
                               checkpointing: str = "none") -> tuple[float, float]:
    """Training FLOPs per token executed by (weight matmuls, attention scores), recompute included.

    Matmuls: 6 N_matmul, x 8/6 under full checkpointing (forward again). Attention: the
    causal half of PaLM's 12 L H T (FlashAttention skips the masked blocks), x 4/3 under full
    or selective checkpointing (selective recomputes the attention core, Korthikanti Sec. 4.3);
    torchtitan's ``selective_op`` recomputes the k, o and MLP-up matmuls of every block
    (2 x their parameters per token) and keeps SDPA's output.

    Example:
        >>> from helper.sizes import parse_model_size
        >>> mm, att = matmul_and_attention_flops(parse_model_size("llama-2-7b"), 4096)
        >>> round(mm / 1e9, 1), round(att / 1e9, 2)
        (39.6, 3.22)
    """
    a = shape.arch
    mm = 6.0 * max(shape.n_params - shape.n_embedding_params, 0.0)
    att = 6.0 * a.n_layers * a.hidden * seq_len
    if checkpointing == "full":
        return mm * 8.0 / 6.0, att * 4.0 / 3.0
    if checkpointing == "selective":
        return mm, att * 4.0 / 3.0
    if checkpointing == "selective_op":  # k, o and up projections forward again; SDPA is saved
        kv = a.n_kv_heads * a.head_dim
        h, i = float(a.hidden), float(a.intermediate)
        again = (h * kv + h * h + h * i) / (2 * h * h + 2 * h * kv + 3 * h * i)
        return mm + 2.0 * again * a.n_layers * shape.block_params, att
    return mm, att


def flops_per_token(shape: ModelShape, seq_len: int, *, activation_checkpointing: bool = False) -> float:
    """Training FLOPs per token: 6 N_matmul + 12 L H T (x 4/3 with full checkpointing).

    Example:
        >>> from helper.sizes import parse_model_size
        >>> round(flops_per_token(parse_model_size("llama-2-7b"), 4096) / 1e9, 1)
        46.1
    """
    a = shape.arch
    matmul_params = max(shape.n_params - shape.n_embedding_params, 0.0)
    flops = 6.0 * matmul_params + 12.0 * a.n_layers * a.hidden * seq_len
    return flops * (8.0 / 6.0) if activation_checkpointing else flops


def compute_seconds(plan: StepPlan, constants: dict[str, float], *, tp: int = 1) -> tuple[float, float]:
    """(matmul, attention) seconds of one optimizer step of ``plan``'s rows (on ``tp`` GPUs together).

    Matmuls run at ``compute_efficiency x h / (h + gemm_hidden_half)`` of the peak: narrow
    models' GEMMs (and the pointwise kernels between them, which scale alike) use the tensor
    cores less well (MPT 125M reaches 45 % MFU where 3B reaches 62 % on the same A100s:
    helper/published.py). Flash attention runs at ``attention_efficiency x s / (s +
    attention_seq_half)`` (short sequences leave the kernel's tiles under-filled; FlashAttention-2
    reaches 50-73 % of A100 peak at long sequences, Dao 2023). Eager attention runs its two
    batched matmuls at the matmul efficiency and streams the s x s scores through HBM.

    Under tensor parallelism (``tp`` > 1) every GPU runs the same rows through GEMMs ``tp``
    times narrower (Megatron's column / row split, Shoeybi et al. 2019, Sec. 3): the width term
    takes ``h / tp`` while the token term keeps the micro-batch's rows (sequence parallelism
    gathers them before each GEMM). The seconds returned are for all ``tp`` GPUs' work.
    """
    c = constants
    spec, a = plan.gpu, plan.shape.arch
    h = float(a.hidden) / max(1, tp)
    tokens = float(plan.micro_batch * plan.seq_len)
    e_mm = (c["compute_efficiency"] * h / (h + c.get("gemm_hidden_half", 0.0))
            * tokens / (tokens + c.get("gemm_tokens_half", 0.0)))
    matmul_s = plan.grad_accum * plan.matmul_flops_per_micro_step / (spec.peak_flops * e_mm)
    if plan.attention == "eager":
        scores = plan.micro_batch * plan.seq_len * a.n_layers * a.n_heads * plan.seq_len
        recompute = 4.0 / 3.0 if plan.checkpointing != "none" else 1.0
        attention_s = plan.grad_accum * (plan.attention_flops_per_micro_step / (spec.peak_flops * e_mm)
                                         + recompute * scores * _EAGER_BYTES_PER_SCORE / (spec.hbm_gbs * 1e9))
    else:
        s = float(plan.seq_len)
        e_att = c.get("attention_efficiency", c["compute_efficiency"]) * s / (s + c.get("attention_seq_half", 0.0))
        attention_s = plan.grad_accum * plan.attention_flops_per_micro_step / (spec.peak_flops * e_att)
    return matmul_s, attention_s
