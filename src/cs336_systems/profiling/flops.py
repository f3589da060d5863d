"""FLOP counts in closed form: the three attention steps (A2 (e)) and a whole model step (A1's MFU).

Per attention call on q of shape (B, H, Tq, d) and k, v of shape (B, H, Tk, d):

- scores ``q @ kᵀ`` and the final ``weights @ v``: ``2·B·H·Tq·Tk·d`` each (a multiply and an add per
  term of each dot product, the usual convention; the 1/√d scaling of the scores, ``B·H·Tq·Tk``,
  is reported apart and not counted in the ratio);
- softmax, as ``cs336_basics.model.softmax`` computes it along a row of ``Tk`` scores: a running
  max (``Tk − 1`` comparisons), a subtraction and an ``exp`` per element (``2·Tk``), a sum
  (``Tk − 1`` additions) and a division per element (``Tk``): ``5·Tk − 2`` per row, about 5 per
  score element.

Causal masking does not change these counts: the naive back end computes every score, masks the
upper triangle to −∞ afterwards and runs the softmax over full rows (the masked exponentials are
zeros, but they are computed).
"""
from __future__ import annotations


def matmul_flops(batch: int, heads: int, q_len: int, k_len: int, d_head: int) -> int:
    """``q @ kᵀ`` (or, with the same shapes, ``weights @ v``): 2 FLOPs per multiply-add."""
    return 2 * batch * heads * q_len * k_len * d_head


def scale_flops(batch: int, heads: int, q_len: int, k_len: int) -> int:
    return batch * heads * q_len * k_len


def softmax_flops(batch: int, heads: int, q_len: int, k_len: int) -> int:
    """max, subtract, exp, sum, divide along each row of ``k_len`` scores."""
    return batch * heads * q_len * (5 * k_len - 2)


def attention_flops(batch: int, heads: int, context: int, d_head: int) -> dict[str, int]:
    """Per attention call (one layer, one forward pass) of self-attention over ``context`` tokens."""
    return {"scores_matmul": matmul_flops(batch, heads, context, context, d_head),
            "scores_scale": scale_flops(batch, heads, context, context),
            "softmax": softmax_flops(batch, heads, context, context),
            "final_matmul": matmul_flops(batch, heads, context, context, d_head)}


# --- a whole model step (A1's achieved FLOP/s and MFU) -----------------------------------------

def model_step_flops(size, *, batch: int, context: int, mode: str, vocab_size: int | None = None) -> int:
    """Matrix-product FLOPs of one step of ``cs336_basics``' TransformerLM (``size``: a ``ModelSize``).

    Forward: ``2·N·tokens`` for the ``N`` parameters a token meets in a matmul (attention and FFN
    projections, LM head; ``accounting.transformer``) plus, per layer, the two attention products
    over the full ``context × context`` score matrix (the naive back end computes the masked half
    too). Backward does two products per forward product (gradients of inputs and of weights):
    ``forward-backward`` is 3× forward, and so is ``train-step``, whose AdamW update is elementwise
    work that MFU conventionally leaves out. Norms, softmax, RoPE and the loss are not counted.
    """
    return sum(model_step_flops_parts(size, batch=batch, context=context, mode=mode, vocab_size=vocab_size).values())


def model_step_flops_parts(size, *, batch: int, context: int, mode: str, vocab_size: int | None = None) -> dict[str, int]:
    """``model_step_flops`` in its two parts: ``projections`` (the attention and FFN projections and
    the LM head, which run as GEMMs) and ``attention_products`` (the two context × context products
    a layer, which a fused attention kernel runs inside itself)."""
    from cs336_systems.accounting.transformer import forward_flops, transformer_matmul_parameters
    from cs336_systems.models import MODES, VOCAB_SIZE

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
    vocab_size = VOCAB_SIZE if vocab_size is None else vocab_size
    d_head = size.d_model // size.num_heads
    passes = 1 if mode == "forward" else 3
    return {"projections": passes * forward_flops(transformer_matmul_parameters(size, vocab_size), batch * context),
            "attention_products": passes * size.num_layers * 2 * matmul_flops(batch, size.num_heads, context, context, d_head)}
