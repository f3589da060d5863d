"""FLOP counts of the three attention steps, in closed form (A2 (e)).

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
