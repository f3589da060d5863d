"""FlashAttention-2 in Triton (B3b, B3c, B4): the forward kernel and two backward variants.

Layout: q (batch, Nq, d); k, v (batch, Nk, d); any strides. The launch grid is one-dimensional over
(tile, batch entry), longest causal tiles first (see ``_tile_and_batch``).

Forward, one program per query tile: stream key tiles, keep the running max ``m``, denominator
``l`` and output accumulator in fp32 registers, and write O and the log-sum-exp L (natural log, fp32).
When the grid has too few programs to fill the GPU (batch 1, short N), each query tile's key tiles
are split over several programs that write partial (accumulator, m, l) in fp32, and a second
kernel combines them (``forward_splits`` chooses how many; NOTES.md, fifth session).
The backward's two kernels split the same way on short grids: each key tile's query tiles (dK/dV)
or each query tile's key tiles (dQ) over several programs that write fp32 partials, which a small
kernel adds up (``backward_splits``; NOTES.md, sixth session).
Backward, after D = rowsum(dO ∘ O): one program per *key* tile accumulates dK and dV over the
query tiles; then a second kernel, one program per *query* tile walking the key tiles, computes dQ.
No two programs write the same memory, at the price of computing S and dP twice (adding dQ across
programs with atomics cost more than the two products it saves: lab/attention/NOTES.md).

Every kernel walks its tiles in two or three ranges, each a call of its ``_*_tiles`` loop with
``MASK`` fixed: tiles that need no mask at all, the causal diagonal, and a ragged last tile when a
length is not a multiple of the tile. The mask arithmetic runs only in the last two, and tiles
wholly above the causal diagonal are never visited. Softmax exponentials use ``exp2`` with log2(e) folded into the
score scale. Plain pointer arithmetic (no block pointers) keeps the kernels working on the Triton
of the GPU machines (3.6) and the newer one CI installs (where ``tl.make_block_ptr`` is gone), and
under ``TRITON_INTERPRET=1`` on a CPU. Triton 3.6's interpreter needs NumPy < 2.4: it holds every
scalar (a program id, an int argument) as a one-element array and turns loop bounds into ints with
``int(array)``, which NumPy 2.4 refuses; later Tritons squeeze the array first.

Eager calls of ``FlashAttentionTriton`` go through a plan cached per input layout (``_Plan``: tiles
fitted to the grid, buffer sizes, and each kernel's launch with its arguments fixed), so that a
small call costs little more host time than its launches; torch.compile traces the plain path.

Selecting the backward: ``FlashAttentionTriton`` uses these Triton kernels;
``FlashAttentionTritonPytorchBackward`` has the same Triton forward with the compiled PyTorch
backward of ``attention.backward``.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import asdict, dataclass, replace

import torch
import triton
import triton.language as tl

from cs336_systems.attention.backward import compiled_flash_backward
from cs336_systems.attention.inputs import causal_flag, check_inputs
from cs336_systems.attention.tuned_tiles import TUNED

# log2(e): the kernels work in base 2 (``exp2``) and return L in natural log. A constexpr, because
# compiled kernels may read only constexpr globals; host code reads ``LOG2_E.value``.
LOG2_E = tl.constexpr(1.4426950408889634)
# Added to masked scores: exp2 of it is exactly 0, and no inf - inf can occur. A constexpr, because
# compiled kernels may read only constexpr globals (the interpreter is laxer).
MASKED = tl.constexpr(-1.0e6)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def _tile_and_batch(n_tiles, n_batch, HEAVY_LAST: tl.constexpr):
    """(tile, batch entry) of this program in a one-dimensional grid, heaviest tiles first.

    Blocks start in program-id order, so issuing the longest causal tiles first leaves the short
    ones to fill the last wave (longest-first scheduling) instead of one batch entry's long tiles
    running alone at the end. ``HEAVY_LAST``: the tile with the highest index has the most work (a
    query tile in the forward and dQ passes); otherwise tile 0 has (a key tile in dK/dV)."""
    pid = tl.program_id(0)
    tile = pid // n_batch
    if HEAVY_LAST:
        tile = n_tiles - 1 - tile
    return tile, pid % n_batch


@triton.jit
def _tile_split_and_batch(n_tiles, n_batch, SPLITS: tl.constexpr, HEAVY_LAST: tl.constexpr):
    """(tile, slice, batch entry) of this program in the one-dimensional grid of a split kernel:
    as ``_tile_and_batch``, each tile's SPLITS slices adjacent in program order."""
    pid = tl.program_id(0)
    per_tile = SPLITS * n_batch
    tile = pid // per_tile
    if HEAVY_LAST:
        tile = n_tiles - 1 - tile
    return tile, (pid % per_tile) // n_batch, pid % n_batch


@triton.jit
def _load_rows(base, offs_rows, stride_row, offs_d, n_rows, MASK: tl.constexpr):
    """The (rows, D) tile at ``base``; with ``MASK``, rows at or past ``n_rows`` read as zeros."""
    ptrs = base + offs_rows[:, None] * stride_row + offs_d[None, :]
    if MASK:
        tile = tl.load(ptrs, mask=(offs_rows < n_rows)[:, None], other=0.0)
    else:
        tile = tl.load(ptrs)
    return tile


# --- forward ---------------------------------------------------------------------------------

@triton.jit
def _mm(a, b, PRECISION: tl.constexpr):
    """``tl.dot`` with the product precision chosen on the host (see ``_precision``)."""
    if PRECISION == "upcast":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _forward_tiles(acc, l, m, q, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, key_lo, key_hi, n_keys,
                   qk_scale, BLOCK_K: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """Fold key tiles [key_lo, key_hi) into the running (acc, l, m) of one query tile."""
    for start in range(key_lo, key_hi, BLOCK_K):
        offs_k = start + tl.arange(0, BLOCK_K)
        k = _load_rows(k_base, offs_k, stride_kn, offs_d, n_keys, MASK)
        v = _load_rows(v_base, offs_k, stride_vn, offs_d, n_keys, MASK)
        s = _mm(q, tl.trans(k), PRECISION) * qk_scale          # log2 units
        if MASK:
            keep = (offs_k < n_keys)[None, :]
            if CAUSAL:
                keep = keep & (offs_q[:, None] >= offs_k[None, :])
            s = s + tl.where(keep, 0.0, MASKED)
        acc, l, m = _softmax_fold(acc, l, m, s, v, PRECISION)
    return acc, l, m


@triton.jit
def _softmax_fold(acc, l, m, s, v, PRECISION: tl.constexpr):
    """Fold one tile of scores ``s`` (log2 units) and its values into the running (acc, l, m)."""
    m_new = tl.maximum(m, tl.max(s, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(s - m_new[:, None])
    l = l * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + _mm(p.to(v.dtype), v, PRECISION)
    return acc, l, m_new


@triton.jit
def _flash_forward_kernel(Q, K, V, O, L, stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn,
                          stride_ob, stride_on, stride_lb, n_batch, n_queries, n_keys, qk_scale,
                          D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
                          PRECISION: tl.constexpr):
    # torch.compile passes Python floats as fp64 scalars; fp64 would leak into the fp32 accumulators.
    qk_scale = tl.cast(qk_scale, tl.float32)
    q_tile, b = _tile_and_batch(tl.cdiv(n_queries, BLOCK_Q), n_batch, CAUSAL)
    q_lo = q_tile * BLOCK_Q
    offs_q = q_lo + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D)
    q_valid = offs_q < n_queries
    q = _load_rows(Q + b * stride_qb, offs_q, stride_qn, offs_d, n_queries, True)
    k_base, v_base = K + b * stride_kb, V + b * stride_vb

    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, D], tl.float32)
    if CAUSAL:
        # Keys before the tile's first query: every score is visible, no mask. Then the diagonal
        # keys [q_lo, q_lo + BLOCK_Q), masked; keys after them are never loaded.
        acc, l, m = _forward_tiles(acc, l, m, q, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, 0, q_lo,
                                   n_keys, qk_scale, BLOCK_K, False, True, PRECISION)
        acc, l, m = _forward_tiles(acc, l, m, q, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, q_lo,
                                   tl.minimum(q_lo + BLOCK_Q, n_keys), n_keys, qk_scale, BLOCK_K, True, True, PRECISION)
    else:
        full = (n_keys // BLOCK_K) * BLOCK_K
        acc, l, m = _forward_tiles(acc, l, m, q, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, 0, full,
                                   n_keys, qk_scale, BLOCK_K, False, False, PRECISION)
        acc, l, m = _forward_tiles(acc, l, m, q, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, full, n_keys,
                                   n_keys, qk_scale, BLOCK_K, True, False, PRECISION)

    out = acc / l[:, None]
    tl.store(O + b * stride_ob + offs_q[:, None] * stride_on + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=q_valid[:, None])
    tl.store(L + b * stride_lb + offs_q, (m + tl.log2(l)) / LOG2_E, mask=q_valid)


# --- forward with the keys split across programs (short grids) -------------------------------

@triton.jit
def _forward_part_kernel(Q, K, V, PART, stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn,
                         n_batch, n_queries, n_keys, qk_scale,
                         D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, SPLITS: tl.constexpr,
                         CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """One query tile's share of the forward over one of SPLITS slices of its key tiles: the
    unnormalised fp32 accumulator and the running max and sum (log2 units) into the fp32 buffer
    PART: ACC (SPLITS, batch, Nq, D), then M and LS (SPLITS, batch, Nq) (one buffer: one
    allocation per call). ``_forward_combine_kernel`` merges the slices.
    For grids with fewer programs than SMs (batch 1, short N), where one query tile walking all
    its keys is the critical path."""
    qk_scale = tl.cast(qk_scale, tl.float32)
    ACC = PART
    M = ACC + SPLITS * n_batch * n_queries * D
    LS = M + SPLITS * n_batch * n_queries
    q_tile, split, b = _tile_split_and_batch(tl.cdiv(n_queries, BLOCK_Q), n_batch, SPLITS, CAUSAL)
    q_lo = q_tile * BLOCK_Q
    offs_q = q_lo + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D)
    q = _load_rows(Q + b * stride_qb, offs_q, stride_qn, offs_d, n_queries, True)
    k_base, v_base = K + b * stride_kb, V + b * stride_vb
    # This slice's key tiles, balanced: [split * T // SPLITS, (split + 1) * T // SPLITS) of the T
    # tiles the query tile sees. Then, as in the one-program forward, the keys that need no mask
    # first and the rest masked.
    key_end = tl.minimum(q_lo + BLOCK_Q, n_keys) if CAUSAL else n_keys
    n_tiles = tl.cdiv(key_end, BLOCK_K)
    lo = (split * n_tiles // SPLITS) * BLOCK_K
    hi = tl.minimum(((split + 1) * n_tiles // SPLITS) * BLOCK_K, key_end)
    open_hi = q_lo if CAUSAL else (n_keys // BLOCK_K) * BLOCK_K
    mid = tl.maximum(tl.minimum(hi, open_hi), lo)
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, D], tl.float32)
    acc, l, m = _forward_tiles(acc, l, m, q, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, lo, mid, n_keys,
                               qk_scale, BLOCK_K, False, CAUSAL, PRECISION)
    acc, l, m = _forward_tiles(acc, l, m, q, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, mid, hi, n_keys,
                               qk_scale, BLOCK_K, True, CAUSAL, PRECISION)
    row = (split * n_batch + b) * n_queries + offs_q
    q_valid = offs_q < n_queries
    tl.store(ACC + row[:, None] * D + offs_d[None, :], acc, mask=q_valid[:, None])
    tl.store(M + row, m, mask=q_valid)
    tl.store(LS + row, l, mask=q_valid)


@triton.jit
def _forward_combine_kernel(PART, O, L, stride_ob, stride_on, stride_lb, n_batch, n_queries,
                            D: tl.constexpr, BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    """O and L (natural log) of BLOCK rows from the SPLITS partial (acc, m, l): rescale each to the
    rows' overall max, add, divide. A slice with no keys has m = -inf and weight 0."""
    ACC = PART
    M = ACC + SPLITS * n_batch * n_queries * D
    LS = M + SPLITS * n_batch * n_queries
    pid = tl.program_id(0)
    b = pid % n_batch
    rows = (pid // n_batch) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D)
    valid = rows < n_queries
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for s in tl.static_range(SPLITS):
        m = tl.maximum(m, tl.load(M + (s * n_batch + b) * n_queries + rows, mask=valid, other=0.0))
    l = tl.zeros([BLOCK], tl.float32)
    acc = tl.zeros([BLOCK, D], tl.float32)
    for s in tl.static_range(SPLITS):
        at = (s * n_batch + b) * n_queries + rows
        weight = tl.exp2(tl.load(M + at, mask=valid, other=0.0) - m)
        l += weight * tl.load(LS + at, mask=valid, other=0.0)
        acc += weight[:, None] * tl.load(ACC + at[:, None] * D + offs_d[None, :], mask=valid[:, None], other=0.0)
    tl.store(O + b * stride_ob + rows[:, None] * stride_on + offs_d[None, :], (acc / l[:, None]).to(O.dtype.element_ty),
             mask=valid[:, None])
    tl.store(L + b * stride_lb + rows, (m + tl.log2(l)) / LOG2_E, mask=valid)


# --- backward --------------------------------------------------------------------------------

@triton.jit
def _delta_kernel(O, DO, DELTA, stride_ob, stride_on, stride_dob, stride_don, stride_db, n_batch, n_rows,
                  D: tl.constexpr, BLOCK: tl.constexpr):
    """D = rowsum(dO ∘ O) in fp32 for BLOCK rows of one batch entry (one launch, where PyTorch
    takes four: two casts, a product and a sum)."""
    pid = tl.program_id(0)
    b = pid % n_batch
    rows = (pid // n_batch) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D)
    valid = rows < n_rows
    o = _load_rows(O + b * stride_ob, rows, stride_on, offs_d, n_rows, True)
    do = _load_rows(DO + b * stride_dob, rows, stride_don, offs_d, n_rows, True)
    tl.store(DELTA + b * stride_db + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1), mask=valid)


@triton.jit
def _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d, q_lo, q_hi,
                n_queries, qk_scale, BLOCK_Q: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
                PRECISION: tl.constexpr):
    """Add the contributions of query tiles [q_lo, q_hi) to one key tile's dK and dV (transposed
    scores)."""
    for start in range(q_lo, q_hi, BLOCK_Q):
        offs_q = start + tl.arange(0, BLOCK_Q)
        q = _load_rows(q_base, offs_q, stride_qn, offs_d, n_queries, MASK)
        do = _load_rows(do_base, offs_q, stride_don, offs_d, n_queries, MASK)
        if MASK:
            in_range = offs_q < n_queries
            lse = tl.load(l_base + offs_q, mask=in_range, other=0.0)
            delta = tl.load(d_base + offs_q, mask=in_range, other=0.0)
        else:
            lse = tl.load(l_base + offs_q)
            delta = tl.load(d_base + offs_q)
        s_t = _mm(k, tl.trans(q), PRECISION) * qk_scale        # (keys, queries), log2 units
        # dP before the exponentials: it does not depend on them, so the tensor cores can work on
        # it while the special-function units compute P.
        dp_t = _mm(v, tl.trans(do), PRECISION)
        p_t = tl.exp2(s_t - lse[None, :] * LOG2_E)
        if MASK:
            keep = in_range[None, :]
            if CAUSAL:
                keep = keep & (offs_q[None, :] >= offs_k[:, None])
            p_t = tl.where(keep, p_t, 0.0)
        dv += _mm(p_t.to(do.dtype), do, PRECISION)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk += _mm(ds_t, q, PRECISION)
    return dk, dv


@triton.jit
def _flash_dkdv_kernel(Q, K, V, DO, L, DELTA, DK, DV, stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn,
                       stride_dob, stride_don, stride_lb, stride_dkb, stride_dkn, stride_dvb, stride_dvn,
                       n_batch, n_queries, n_keys, scale, qk_scale,
                       D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
                       PRECISION: tl.constexpr):
    # torch.compile passes Python floats as fp64 scalars; fp64 would leak into the fp32 accumulators.
    qk_scale = tl.cast(qk_scale, tl.float32)
    scale = tl.cast(scale, tl.float32)
    k_tile, b = _tile_and_batch(tl.cdiv(n_keys, BLOCK_K), n_batch, False)
    k_lo = k_tile * BLOCK_K
    offs_k = k_lo + tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, D)
    k_valid = offs_k < n_keys
    k = _load_rows(K + b * stride_kb, offs_k, stride_kn, offs_d, n_keys, True)
    v = _load_rows(V + b * stride_vb, offs_k, stride_vn, offs_d, n_keys, True)
    q_base, do_base = Q + b * stride_qb, DO + b * stride_dob
    l_base, d_base = L + b * stride_lb, DELTA + b * stride_lb
    dk = tl.zeros([BLOCK_K, D], tl.float32)
    dv = tl.zeros([BLOCK_K, D], tl.float32)
    full = (n_queries // BLOCK_Q) * BLOCK_Q
    if CAUSAL:
        # Queries before k_lo see none of these keys: skipped. The diagonal [k_lo, k_lo + BLOCK_K) is
        # masked; later whole tiles are not; a ragged last query tile is masked again.
        diag_hi = tl.minimum(k_lo + BLOCK_K, n_queries)
        rest_hi = tl.maximum(full, diag_hi)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                             k_lo, diag_hi, n_queries, qk_scale, BLOCK_Q, True, True, PRECISION)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                             diag_hi, rest_hi, n_queries, qk_scale, BLOCK_Q, False, True, PRECISION)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                             rest_hi, n_queries, n_queries, qk_scale, BLOCK_Q, True, True, PRECISION)
    else:
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                             0, full, n_queries, qk_scale, BLOCK_Q, False, False, PRECISION)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                             full, n_queries, n_queries, qk_scale, BLOCK_Q, True, False, PRECISION)
    tl.store(DK + b * stride_dkb + offs_k[:, None] * stride_dkn + offs_d[None, :], (dk * scale).to(DK.dtype.element_ty),
             mask=k_valid[:, None])
    tl.store(DV + b * stride_dvb + offs_k[:, None] * stride_dvn + offs_d[None, :], dv.to(DV.dtype.element_ty),
             mask=k_valid[:, None])


@triton.jit
def _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, k_lo, k_hi, n_keys,
              qk_scale, BLOCK_K: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """Add the contributions of key tiles [k_lo, k_hi) to one query tile's dQ."""
    for start in range(k_lo, k_hi, BLOCK_K):
        offs_k = start + tl.arange(0, BLOCK_K)
        k = _load_rows(k_base, offs_k, stride_kn, offs_d, n_keys, MASK)
        v = _load_rows(v_base, offs_k, stride_vn, offs_d, n_keys, MASK)
        s = _mm(q, tl.trans(k), PRECISION) * qk_scale
        p = tl.exp2(s - lse[:, None] * LOG2_E)
        if MASK:
            keep = (offs_k < n_keys)[None, :]
            if CAUSAL:
                keep = keep & (offs_q[:, None] >= offs_k[None, :])
            p = tl.where(keep, p, 0.0)
        dp = _mm(do, tl.trans(v), PRECISION)
        ds = p * (dp - delta[:, None])
        dq += _mm(ds.to(k.dtype), k, PRECISION)
    return dq


@triton.jit
def _flash_dq_kernel(Q, K, V, DO, L, DELTA, DQ, stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn,
                     stride_dob, stride_don, stride_lb, stride_dqb, stride_dqn, n_batch, n_queries, n_keys, scale,
                     qk_scale,
                     D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
                     PRECISION: tl.constexpr):
    # torch.compile passes Python floats as fp64 scalars; fp64 would leak into the fp32 accumulators.
    qk_scale = tl.cast(qk_scale, tl.float32)
    q_tile, b = _tile_and_batch(tl.cdiv(n_queries, BLOCK_Q), n_batch, CAUSAL)
    q_lo = q_tile * BLOCK_Q
    offs_q = q_lo + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D)
    q_valid = offs_q < n_queries
    q = _load_rows(Q + b * stride_qb, offs_q, stride_qn, offs_d, n_queries, True)
    do = _load_rows(DO + b * stride_dob, offs_q, stride_don, offs_d, n_queries, True)
    lse = tl.load(L + b * stride_lb + offs_q, mask=q_valid, other=0.0)
    delta = tl.load(DELTA + b * stride_lb + offs_q, mask=q_valid, other=0.0)
    k_base, v_base = K + b * stride_kb, V + b * stride_vb
    dq = tl.zeros([BLOCK_Q, D], tl.float32)
    if CAUSAL:
        dq = _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, 0, q_lo, n_keys,
                       qk_scale, BLOCK_K, False, True, PRECISION)
        dq = _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, q_lo,
                       tl.minimum(q_lo + BLOCK_Q, n_keys), n_keys, qk_scale, BLOCK_K, True, True, PRECISION)
    else:
        full = (n_keys // BLOCK_K) * BLOCK_K
        dq = _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, 0, full, n_keys,
                       qk_scale, BLOCK_K, False, False, PRECISION)
        dq = _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, full, n_keys,
                       n_keys, qk_scale, BLOCK_K, True, False, PRECISION)
    tl.store(DQ + b * stride_dqb + offs_q[:, None] * stride_dqn + offs_d[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=q_valid[:, None])


# --- backward with each tile's range split across programs (short grids) -----------------------

@triton.jit
def _clamp(x, lo, hi):
    return tl.minimum(tl.maximum(x, lo), hi)


@triton.jit
def _dkdv_part_kernel(Q, K, V, DO, L, DELTA, PART, stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn,
                      stride_dob, stride_don, stride_lb, n_batch, n_queries, n_keys, qk_scale,
                      D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, SPLITS: tl.constexpr,
                      CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """One key tile's dK (unscaled) and dV over one of SPLITS slices of the query tiles it sees,
    in fp32 into PART: DK (SPLITS, batch, Nk, D), then DV of the same shape (one buffer: one
    allocation per call). ``_dkdv_combine_kernel`` adds the slices. For grids with fewer
    programs than SMs (batch 1, short N), where one key tile walking all its queries is the
    critical path."""
    qk_scale = tl.cast(qk_scale, tl.float32)
    # Tile 0 first: it sees the most causal queries.
    k_tile, split, b = _tile_split_and_batch(tl.cdiv(n_keys, BLOCK_K), n_batch, SPLITS, False)
    k_lo = k_tile * BLOCK_K
    offs_k = k_lo + tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, D)
    k = _load_rows(K + b * stride_kb, offs_k, stride_kn, offs_d, n_keys, True)
    v = _load_rows(V + b * stride_vb, offs_k, stride_vn, offs_d, n_keys, True)
    q_base, do_base = Q + b * stride_qb, DO + b * stride_dob
    l_base, d_base = L + b * stride_lb, DELTA + b * stride_lb
    # This slice's query tiles, balanced: [split * T // SPLITS, (split + 1) * T // SPLITS) of the T
    # tiles the key tile sees (causal: from its diagonal on; BLOCK_K is a multiple of BLOCK_Q, so
    # they are whole query tiles). Within the slice, the same three ranges as the one-program
    # kernel, each cut to the slice: the masked diagonal, whole tiles with no mask, a ragged end.
    q_start = k_lo if CAUSAL else 0
    n_tiles = tl.cdiv(tl.maximum(n_queries - q_start, 0), BLOCK_Q)
    lo = q_start + (split * n_tiles // SPLITS) * BLOCK_Q
    hi = tl.minimum(q_start + ((split + 1) * n_tiles // SPLITS) * BLOCK_Q, n_queries)
    full = (n_queries // BLOCK_Q) * BLOCK_Q
    dk = tl.zeros([BLOCK_K, D], tl.float32)
    dv = tl.zeros([BLOCK_K, D], tl.float32)
    if CAUSAL:
        diag_hi = _clamp(k_lo + BLOCK_K, lo, hi)
        rest_hi = _clamp(full, diag_hi, hi)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                             lo, diag_hi, n_queries, qk_scale, BLOCK_Q, True, True, PRECISION)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                             diag_hi, rest_hi, n_queries, qk_scale, BLOCK_Q, False, True, PRECISION)
        # The ragged end (at most one tile, past `full`) lies in the slice that reaches n_queries;
        # written as [.., n_queries) rather than [rest_hi, hi), with which ptxas spilled 128-136
        # bytes at bf16 d = 64 (0-4 this way; the unsplit kernel 0).
        ragged_lo = tl.where(hi < n_queries, n_queries, rest_hi)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                             ragged_lo, n_queries, n_queries, qk_scale, BLOCK_Q, True, True, PRECISION)
    else:
        mid = _clamp(full, lo, hi)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                             lo, mid, n_queries, qk_scale, BLOCK_Q, False, False, PRECISION)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                             mid, hi, n_queries, qk_scale, BLOCK_Q, True, False, PRECISION)
    row = (split * n_batch + b) * n_keys + offs_k
    at = row[:, None] * D + offs_d[None, :]
    k_valid = (offs_k < n_keys)[:, None]
    tl.store(PART + at, dk, mask=k_valid)
    tl.store(PART + SPLITS * n_batch * n_keys * D + at, dv, mask=k_valid)


@triton.jit
def _dq_part_kernel(Q, K, V, DO, L, DELTA, PART, stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn,
                    stride_dob, stride_don, stride_lb, n_batch, n_queries, n_keys, qk_scale,
                    D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, SPLITS: tl.constexpr,
                    CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """One query tile's dQ (unscaled) over one of SPLITS slices of its key tiles, in fp32 into
    PART (SPLITS, batch, Nq, D); ``_dq_combine_kernel`` adds the slices. The key slices are cut as
    in ``_forward_part_kernel``."""
    qk_scale = tl.cast(qk_scale, tl.float32)
    q_tile, split, b = _tile_split_and_batch(tl.cdiv(n_queries, BLOCK_Q), n_batch, SPLITS, CAUSAL)
    q_lo = q_tile * BLOCK_Q
    offs_q = q_lo + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D)
    q_valid = offs_q < n_queries
    q = _load_rows(Q + b * stride_qb, offs_q, stride_qn, offs_d, n_queries, True)
    do = _load_rows(DO + b * stride_dob, offs_q, stride_don, offs_d, n_queries, True)
    lse = tl.load(L + b * stride_lb + offs_q, mask=q_valid, other=0.0)
    delta = tl.load(DELTA + b * stride_lb + offs_q, mask=q_valid, other=0.0)
    k_base, v_base = K + b * stride_kb, V + b * stride_vb
    key_end = tl.minimum(q_lo + BLOCK_Q, n_keys) if CAUSAL else n_keys
    n_tiles = tl.cdiv(key_end, BLOCK_K)
    lo = (split * n_tiles // SPLITS) * BLOCK_K
    hi = tl.minimum(((split + 1) * n_tiles // SPLITS) * BLOCK_K, key_end)
    mid = _clamp(q_lo if CAUSAL else (n_keys // BLOCK_K) * BLOCK_K, lo, hi)
    dq = tl.zeros([BLOCK_Q, D], tl.float32)
    dq = _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, lo, mid, n_keys,
                   qk_scale, BLOCK_K, False, CAUSAL, PRECISION)
    dq = _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, mid, hi, n_keys,
                   qk_scale, BLOCK_K, True, CAUSAL, PRECISION)
    row = (split * n_batch + b) * n_queries + offs_q
    tl.store(PART + row[:, None] * D + offs_d[None, :], dq, mask=q_valid[:, None])


@triton.jit
def _sum_slices(part, rows, valid, offs_d, slice_rows, D: tl.constexpr, BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    """The sum over SPLITS slices of fp32 (BLOCK, D) tiles at ``rows`` of ``part``, whose slices are
    ``slice_rows`` rows apart."""
    total = tl.zeros([BLOCK, D], tl.float32)
    for s in tl.static_range(SPLITS):
        total += tl.load(part + (s * slice_rows + rows)[:, None] * D + offs_d[None, :], mask=valid[:, None],
                         other=0.0)
    return total


@triton.jit
def _dkdv_combine_kernel(PART, DK, DV, stride_dkb, stride_dkn, stride_dvb, stride_dvn, n_batch, n_keys, scale,
                         D: tl.constexpr, BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    """dK (scaled) and dV of BLOCK key rows: the sums of ``_dkdv_part_kernel``'s slices."""
    scale = tl.cast(scale, tl.float32)
    pid = tl.program_id(0)
    b = pid % n_batch
    rows = (pid // n_batch) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D)
    valid = rows < n_keys
    slice_rows = n_batch * n_keys
    dk = _sum_slices(PART, b * n_keys + rows, valid, offs_d, slice_rows, D, BLOCK, SPLITS)
    dv = _sum_slices(PART + SPLITS * slice_rows * D, b * n_keys + rows, valid, offs_d, slice_rows, D, BLOCK, SPLITS)
    tl.store(DK + b * stride_dkb + rows[:, None] * stride_dkn + offs_d[None, :], (dk * scale).to(DK.dtype.element_ty),
             mask=valid[:, None])
    tl.store(DV + b * stride_dvb + rows[:, None] * stride_dvn + offs_d[None, :], dv.to(DV.dtype.element_ty),
             mask=valid[:, None])


@triton.jit
def _dq_combine_kernel(PART, DQ, stride_dqb, stride_dqn, n_batch, n_queries, scale,
                       D: tl.constexpr, BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    """dQ (scaled) of BLOCK query rows: the sum of ``_dq_part_kernel``'s slices."""
    scale = tl.cast(scale, tl.float32)
    pid = tl.program_id(0)
    b = pid % n_batch
    rows = (pid // n_batch) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D)
    valid = rows < n_queries
    dq = _sum_slices(PART, b * n_queries + rows, valid, offs_d, n_batch * n_queries, D, BLOCK, SPLITS)
    tl.store(DQ + b * stride_dqb + rows[:, None] * stride_dqn + offs_d[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=valid[:, None])


# --- launch ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelTiles:
    """One kernel's launch: its query and key tile sizes, warps and software-pipelining stages."""
    block_q: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 2


@dataclass(frozen=True)
class Tiles:
    """The kernels' launches: the forward's, the dK/dV kernel's and the dQ kernel's.

    The causal split needs BLOCK_Q to be a multiple of BLOCK_K in the forward and the dQ pass (they
    walk keys up to their own diagonal tile), and BLOCK_K a multiple of BLOCK_Q in the dK/dV pass
    (it walks queries from its own)."""
    forward: KernelTiles
    dkdv: KernelTiles
    dq: KernelTiles

    def __post_init__(self):
        for name, big, small in (("forward", "block_q", "block_k"), ("dq", "block_q", "block_k"),
                                 ("dkdv", "block_k", "block_q")):
            t = getattr(self, name)
            if getattr(t, big) % getattr(t, small):
                raise ValueError(f"{name} tiles {t}: {big} must be a multiple of {small} (the causal split)")

    def to_json(self) -> dict:
        return {name: asdict(getattr(self, name)) for name in ("forward", "dkdv", "dq")}

    @classmethod
    def from_json(cls, data: dict) -> "Tiles":
        return cls(**{name: KernelTiles(**data[name]) for name in ("forward", "dkdv", "dq")})


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


@functools.lru_cache(maxsize=None)
def _tuned() -> dict[str, Tiles]:
    """The winners of ``python -m cs336_systems.attention.tune``, committed in ``tuned_tiles.py`` (a
    module, so a rule that runs these kernels depends on it) so that runs never re-tune."""
    return {key: Tiles.from_json(entry["tiles"]) for key, entry in TUNED.items()}


def default_tiles(d: int, dtype: torch.dtype) -> Tiles:
    if dtype == torch.float32:
        # The fastest of a batch-1 sweep on the H100 with 3xTF32 products (NOTES.md, third session);
        # at d = 128 every larger tile was slower or did not fit in shared memory.
        if d == 128:
            return Tiles(KernelTiles(32, 32), KernelTiles(32, 32), KernelTiles(32, 32))
        return Tiles(KernelTiles(64, 64), KernelTiles(32, 32), KernelTiles(64, 64))
    warps = 8 if d == 128 else 4
    bwd = 64 if d <= 64 else 32
    return Tiles(KernelTiles(128, 64, warps, 2), KernelTiles(bwd, bwd, warps, 2), KernelTiles(bwd, bwd, warps, 2))


def choose_tiles(d: int, dtype: torch.dtype) -> Tiles:
    if interpreting():
        small = KernelTiles(16, 16, 1, 1)      # small: many tiles per test
        return Tiles(KernelTiles(32, 16, 1, 1), small, small)
    return _tuned().get(f"{_dtype_name(dtype)}_d{d}") or default_tiles(d, dtype)


def _precision(dtype: torch.dtype) -> str:
    # fp32 inputs: fp32-accurate products. Where the GPU has TF32 tensor cores, as three TF32
    # products (the operands split into a high and a low TF32 part; the low x low term dropped):
    # on the H100 as accurate as FMA products against float64 (relative errors 3e-7 to 1e-6 both
    # ways) and many times faster (NOTES.md, third session). Plain TF32 would cost accuracy.
    if dtype == torch.float32:
        return "tf32x3" if _tf32_tensor_cores() else "ieee"
    # Triton's CPU interpreter computes bf16 dot products wrongly (seen with Triton 3.9: garbage of
    # order 1e10), so there the bf16 tiles are multiplied in fp32. Every rounding to bf16 the GPU
    # kernel does (P before P·V, dS before dS·K) still happens before the product.
    if dtype == torch.bfloat16 and interpreting():
        return "upcast"
    return "tf32"


@functools.lru_cache(maxsize=None)
def _tf32_tensor_cores() -> bool:
    return not interpreting() and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8


def _check_device(q: torch.Tensor) -> None:
    if q.device.type != "cuda" and not interpreting():
        raise ValueError(f"FlashAttentionTriton needs CUDA tensors (got {q.device}); on a CPU, set "
                         "TRITON_INTERPRET=1 before importing it to run the kernels in Triton's interpreter")
    if interpreting():
        _check_interpreter_numpy(triton.__version__)


def _check_interpreter_numpy(triton_version: str) -> None:
    """One clear line instead of the interpreter's 'only 0-dimensional arrays' deep in a kernel."""
    import numpy

    def major_minor(version: str) -> tuple[int, int]:
        return tuple(int(part) for part in version.split(".")[:2])

    if major_minor(triton_version) <= (3, 6) and major_minor(numpy.__version__) >= (2, 4):
        raise RuntimeError(f"Triton {triton_version}'s interpreter needs NumPy < 2.4 (this is {numpy.__version__}): "
                           "pip install 'numpy<2.4', or a newer Triton")


def _options(t: KernelTiles) -> dict:
    return dict(num_warps=t.num_warps, num_stages=t.num_stages)


# Each kernel's launch is described once, by a function of the tensors and tiles that returns the
# grid, the arguments after the tensors (strides, sizes, scales) and the constexprs, both as
# keyword arguments named as in the kernel's signature. The plain launch functions below and the
# cached per-shape plans (``_Launch``, ``_Plan``) both build their launches from these.

def _forward_args(q, k, v, out, lse, is_causal: bool, t: KernelTiles):
    batch, n_q, d = q.shape
    scalars = dict(stride_qb=q.stride(0), stride_qn=q.stride(1), stride_kb=k.stride(0), stride_kn=k.stride(1),
                   stride_vb=v.stride(0), stride_vn=v.stride(1), stride_ob=out.stride(0), stride_on=out.stride(1),
                   stride_lb=lse.stride(0), n_batch=batch, n_queries=n_q, n_keys=k.shape[1],
                   qk_scale=LOG2_E.value / math.sqrt(d))
    constexprs = dict(D=d, BLOCK_Q=t.block_q, BLOCK_K=t.block_k, CAUSAL=is_causal, PRECISION=_precision(q.dtype))
    return (triton.cdiv(n_q, t.block_q) * batch,), scalars, constexprs


# How many programs share one query tile's keys (the split-key forward). From batch-1 sweeps on the
# H100 (NOTES.md, fifth session: bf16 d = 16 to 128 and fp32 d = 16, 64, 128, N = 1024 to 65536,
# 1 to 16 slices): the fastest count filled the GPU to about 32 resident warps per SM (16 for bf16
# at d = 128, whose tiles hold the most registers), with at most 8 slices (4 for bf16 at d = 64 and
# 128), each at least MIN_SLICE_TILES key tiles long.
MIN_SLICE_TILES = 4


def _split_limits(d: int, dtype: torch.dtype) -> tuple[int, int]:
    """(warps per SM to fill to, most slices) for the forward at this head dimension and dtype."""
    if dtype == torch.float32 or d <= 32:
        return 32, 8
    return (32, 4) if d == 64 else (16, 4)


def forward_splits(t: KernelTiles, batch: int, n_q: int, n_k: int, d: int, dtype: torch.dtype, sms: int) -> int:
    """The largest power of two of slices that keeps the grid's warps within ``_split_limits``'s
    per SM and its slices, each slice at least MIN_SLICE_TILES key tiles long: 1 for grids that
    already fill the GPU (the leaderboard case: 2048 programs of 8 warps)."""
    warps_per_sm, most = _split_limits(d, dtype)
    return _power_of_two_slices(triton.cdiv(n_q, t.block_q) * batch, triton.cdiv(n_k, t.block_k), t.num_warps,
                                warps_per_sm, most, sms)


def _power_of_two_slices(programs: int, walked_tiles: int, num_warps: int, warps_per_sm: int, most: int,
                         sms: int, min_tiles: int = MIN_SLICE_TILES) -> int:
    """The largest power of two of slices, at most ``most``, that keeps a grid of ``programs``
    (times the slices) of ``num_warps`` warps within ``warps_per_sm`` per SM, each slice at least
    ``min_tiles`` of the ``walked_tiles`` that one program walks."""
    splits = 1
    while (splits * 2 <= most and programs * splits * 2 * num_warps <= warps_per_sm * sms
           and walked_tiles // (splits * 2) >= min_tiles):
        splits *= 2
    return splits


# How many programs share one key tile's query tiles (dK/dV) or one query tile's key tiles (dQ) in
# the split backward, per kernel: (warps per SM to fill to, most slices, fewest tiles per slice,
# fewest tiles a program walks for any split at all). Fitted to batch-1 sweeps on the H100
# (``probe --backward-splits``, NOTES.md, sixth session; results/h100/B5/tuning/backward_splits_*):
# - 16-bit, d = 16 to 128, N = 256 to 16384: small head dimensions take the most slices (dQ, with
#   one accumulator, up to 16), slices as short as one tile pay, but below 16 tiles (N < 1024 at
#   64-row tiles) no split did: the backward is a few microseconds and the combine launch costs more.
# - fp32, d = 16 to 128, N = 256 to 4096: splitting pays from the shortest length on (its 32-row
#   tiles and 3xTF32 products make each tile long), dQ with slices of at least two tiles.
# With these limits the chosen count's time is within 2 % of the best count's at 16-bit d >= 64 and
# within 17 % at every measured point.
def _backward_split_limits(d: int, dtype: torch.dtype) -> dict[str, tuple[int, int, int, int]]:
    if dtype == torch.float32:
        return {"dkdv": (16, 8, 1, 1), "dq": (16, 8, 2, 1)}
    if d <= 32:
        return {"dkdv": (32, 8, 1, 16), "dq": (32, 16, 1, 16)}
    limits = (16, 4, 1, 16) if d == 64 else (8, 4, 1, 16)
    return {"dkdv": limits, "dq": limits}


def backward_splits(tiles: Tiles, batch: int, n_q: int, n_k: int, d: int, dtype: torch.dtype,
                    sms: int) -> tuple[int, int]:
    """(slices of each key tile's query tiles in dK/dV, slices of each query tile's key tiles in
    dQ): powers of two as in ``forward_splits``, with ``_backward_split_limits``; (1, 1) for grids
    that already fill the GPU."""
    limits = _backward_split_limits(d, dtype)

    def slices(kernel: str, t: KernelTiles, programs: int, walked: int) -> int:
        warps_per_sm, most, min_tiles, from_tiles = limits[kernel]
        if walked < from_tiles:
            return 1
        return _power_of_two_slices(programs, walked, t.num_warps, warps_per_sm, most, sms, min_tiles)

    dkdv, dq = tiles.dkdv, tiles.dq
    return (slices("dkdv", dkdv, triton.cdiv(n_k, dkdv.block_k) * batch, triton.cdiv(n_q, dkdv.block_q)),
            slices("dq", dq, triton.cdiv(n_q, dq.block_q) * batch, triton.cdiv(n_k, dq.block_k)))


def _forward_part_args(q, k, v, is_causal: bool, t: KernelTiles, splits: int):
    batch, n_q, d = q.shape
    scalars = dict(stride_qb=q.stride(0), stride_qn=q.stride(1), stride_kb=k.stride(0), stride_kn=k.stride(1),
                   stride_vb=v.stride(0), stride_vn=v.stride(1), n_batch=batch, n_queries=n_q, n_keys=k.shape[1],
                   qk_scale=LOG2_E.value / math.sqrt(d))
    constexprs = dict(D=d, BLOCK_Q=t.block_q, BLOCK_K=t.block_k, SPLITS=splits, CAUSAL=is_causal,
                      PRECISION=_precision(q.dtype))
    return (triton.cdiv(n_q, t.block_q) * splits * batch,), scalars, constexprs


def _combine_args(out, lse, splits: int):
    batch, n_q, d = out.shape
    block = max(16, 4096 // d)
    scalars = dict(stride_ob=out.stride(0), stride_on=out.stride(1), stride_lb=lse.stride(0), n_batch=batch,
                   n_queries=n_q)
    return (triton.cdiv(n_q, block) * batch,), scalars, dict(D=d, BLOCK=block, SPLITS=splits)


def _part_numel(q, splits: int) -> int:
    batch, n_q, d = q.shape
    return splits * batch * n_q * (d + 2)


def _delta_args(out, grad_out, delta):
    batch, n_q, d = out.shape
    block = max(16, 8192 // d)
    scalars = dict(stride_ob=out.stride(0), stride_on=out.stride(1), stride_dob=grad_out.stride(0),
                   stride_don=grad_out.stride(1), stride_db=delta.stride(0), n_batch=batch, n_rows=n_q)
    return (triton.cdiv(n_q, block) * batch,), scalars, dict(D=d, BLOCK=block)


def _dkdv_args(q, k, v, grad_out, lse, grad_k, grad_v, is_causal: bool, t: KernelTiles):
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    scale = 1.0 / math.sqrt(d)
    scalars = dict(stride_qb=q.stride(0), stride_qn=q.stride(1), stride_kb=k.stride(0), stride_kn=k.stride(1),
                   stride_vb=v.stride(0), stride_vn=v.stride(1), stride_dob=grad_out.stride(0),
                   stride_don=grad_out.stride(1), stride_lb=lse.stride(0), stride_dkb=grad_k.stride(0),
                   stride_dkn=grad_k.stride(1), stride_dvb=grad_v.stride(0), stride_dvn=grad_v.stride(1),
                   n_batch=batch, n_queries=n_q, n_keys=n_k, scale=scale, qk_scale=scale * LOG2_E.value)
    constexprs = dict(D=d, BLOCK_Q=t.block_q, BLOCK_K=t.block_k, CAUSAL=is_causal, PRECISION=_precision(q.dtype))
    return (triton.cdiv(n_k, t.block_k) * batch,), scalars, constexprs


def _dq_args(q, k, v, grad_out, lse, grad_q, is_causal: bool, t: KernelTiles):
    batch, n_q, d = q.shape
    scale = 1.0 / math.sqrt(d)
    scalars = dict(stride_qb=q.stride(0), stride_qn=q.stride(1), stride_kb=k.stride(0), stride_kn=k.stride(1),
                   stride_vb=v.stride(0), stride_vn=v.stride(1), stride_dob=grad_out.stride(0),
                   stride_don=grad_out.stride(1), stride_lb=lse.stride(0), stride_dqb=grad_q.stride(0),
                   stride_dqn=grad_q.stride(1), n_batch=batch, n_queries=n_q, n_keys=k.shape[1], scale=scale,
                   qk_scale=scale * LOG2_E.value)
    constexprs = dict(D=d, BLOCK_Q=t.block_q, BLOCK_K=t.block_k, CAUSAL=is_causal, PRECISION=_precision(q.dtype))
    return (triton.cdiv(n_q, t.block_q) * batch,), scalars, constexprs


def _backward_part_args(q, k, v, grad_out, lse, is_causal: bool, t: KernelTiles, splits: int, n_tiles: int):
    """The launch of either split backward kernel (their signatures are the same): ``n_tiles`` tiles
    (key tiles for dK/dV, query tiles for dQ), each over ``splits`` programs."""
    batch, n_q, d = q.shape
    scalars = dict(stride_qb=q.stride(0), stride_qn=q.stride(1), stride_kb=k.stride(0), stride_kn=k.stride(1),
                   stride_vb=v.stride(0), stride_vn=v.stride(1), stride_dob=grad_out.stride(0),
                   stride_don=grad_out.stride(1), stride_lb=lse.stride(0), n_batch=batch, n_queries=n_q,
                   n_keys=k.shape[1], qk_scale=LOG2_E.value / math.sqrt(d))
    constexprs = dict(D=d, BLOCK_Q=t.block_q, BLOCK_K=t.block_k, SPLITS=splits, CAUSAL=is_causal,
                      PRECISION=_precision(q.dtype))
    return (n_tiles * splits * batch,), scalars, constexprs


def _dkdv_part_args(q, k, v, grad_out, lse, is_causal: bool, t: KernelTiles, splits: int):
    return _backward_part_args(q, k, v, grad_out, lse, is_causal, t, splits, triton.cdiv(k.shape[1], t.block_k))


def _dq_part_args(q, k, v, grad_out, lse, is_causal: bool, t: KernelTiles, splits: int):
    return _backward_part_args(q, k, v, grad_out, lse, is_causal, t, splits, triton.cdiv(q.shape[1], t.block_q))


def _dkdv_combine_args(grad_k, grad_v, splits: int):
    batch, n_k, d = grad_k.shape
    block = max(16, 2048 // d)        # two outputs: half the forward combine's rows
    scalars = dict(stride_dkb=grad_k.stride(0), stride_dkn=grad_k.stride(1), stride_dvb=grad_v.stride(0),
                   stride_dvn=grad_v.stride(1), n_batch=batch, n_keys=n_k, scale=1.0 / math.sqrt(d))
    return (triton.cdiv(n_k, block) * batch,), scalars, dict(D=d, BLOCK=block, SPLITS=splits)


def _dq_combine_args(grad_q, splits: int):
    batch, n_q, d = grad_q.shape
    block = max(16, 4096 // d)
    scalars = dict(stride_dqb=grad_q.stride(0), stride_dqn=grad_q.stride(1), n_batch=batch, n_queries=n_q,
                   scale=1.0 / math.sqrt(d))
    return (triton.cdiv(n_q, block) * batch,), scalars, dict(D=d, BLOCK=block, SPLITS=splits)


def flash_forward_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool,
                         tiles: Tiles | None = None, splits: int = 1):
    """Launch the forward kernel, or with ``splits`` > 1 the split-key forward and its combine;
    returns (O in q's dtype, L fp32 of shape (batch, Nq))."""
    batch, n_q, d = q.shape
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    t = (tiles or choose_tiles(d, q.dtype)).forward
    out = torch.empty(batch, n_q, d, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, n_q, dtype=torch.float32, device=q.device)
    if splits > 1:
        part = torch.empty(_part_numel(q, splits), dtype=torch.float32, device=q.device)
        grid, scalars, constexprs = _forward_part_args(q, k, v, is_causal, t, splits)
        _forward_part_kernel[grid](Q=q, K=k, V=v, PART=part, **scalars, **constexprs, **_options(t))
        grid, scalars, constexprs = _combine_args(out, lse, splits)
        _forward_combine_kernel[grid](PART=part, O=out, L=lse, **scalars, **constexprs)
        return out, lse
    grid, scalars, constexprs = _forward_args(q, k, v, out, lse, is_causal, t)
    _flash_forward_kernel[grid](Q=q, K=k, V=v, O=out, L=lse, **scalars, **constexprs, **_options(t))
    return out, lse


def backward_delta(out: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """D = rowsum(dO ∘ O) in fp32, shape (batch, Nq); both inputs with unit last stride."""
    delta = torch.empty(out.shape[:2], dtype=torch.float32, device=out.device)
    grid, scalars, constexprs = _delta_args(out, grad_out, delta)
    _delta_kernel[grid](O=out, DO=grad_out, DELTA=delta, **scalars, **constexprs)
    return delta


def launch_dkdv(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal: bool, t: KernelTiles) -> None:
    grid, scalars, constexprs = _dkdv_args(q, k, v, grad_out, lse, grad_k, grad_v, is_causal, t)
    _flash_dkdv_kernel[grid](Q=q, K=k, V=v, DO=grad_out, L=lse, DELTA=delta, DK=grad_k, DV=grad_v, **scalars,
                             **constexprs, **_options(t))


def launch_dq(q, k, v, grad_out, lse, delta, grad_q, is_causal: bool, t: KernelTiles) -> None:
    grid, scalars, constexprs = _dq_args(q, k, v, grad_out, lse, grad_q, is_causal, t)
    _flash_dq_kernel[grid](Q=q, K=k, V=v, DO=grad_out, L=lse, DELTA=delta, DQ=grad_q, **scalars, **constexprs,
                           **_options(t))


def launch_dkdv_split(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal: bool, t: KernelTiles,
                      splits: int) -> None:
    """The dK/dV kernel with each key tile's query tiles split over ``splits`` programs, then their sum."""
    _split_dkdv_launch(q, k, v, grad_out, lse, grad_k, grad_v, is_causal, t, splits)(
        Q=q, K=k, V=v, DO=grad_out, L=lse, DELTA=delta, DK=grad_k, DV=grad_v)


def launch_dq_split(q, k, v, grad_out, lse, delta, grad_q, is_causal: bool, t: KernelTiles, splits: int) -> None:
    """The dQ kernel with each query tile's key tiles split over ``splits`` programs, then their sum."""
    _split_dq_launch(q, k, v, grad_out, lse, grad_q, is_causal, t, splits)(Q=q, K=k, V=v, DO=grad_out, L=lse,
                                                                           DELTA=delta, DQ=grad_q)


def backward_kernels(q, k, v, grad_out, lse, delta, is_causal: bool, tiles: Tiles, splits: tuple[int, int] = (1, 1)):
    """dQ, dK, dV from the dK/dV kernel and then the dQ kernel, with ``tiles``. ``splits``: (dK/dV,
    dQ) slices for the split kernels (``backward_splits``)."""
    grad_k, grad_v, grad_q = torch.empty_like(k), torch.empty_like(v), torch.empty_like(q)
    dkdv_splits, dq_splits = splits
    if dkdv_splits > 1:
        launch_dkdv_split(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal, tiles.dkdv, dkdv_splits)
    else:
        launch_dkdv(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal, tiles.dkdv)
    if dq_splits > 1:
        launch_dq_split(q, k, v, grad_out, lse, delta, grad_q, is_causal, tiles.dq, dq_splits)
    else:
        launch_dq(q, k, v, grad_out, lse, delta, grad_q, is_causal, tiles.dq)
    return grad_q, grad_k, grad_v


def flash_backward_triton(q, k, v, out, grad_out, lse, is_causal: bool, tiles: Tiles | None = None,
                          splits: tuple[int, int] = (1, 1)):
    """dQ, dK, dV by recomputation: D = rowsum(dO ∘ O), then the backward kernels."""
    q, k, v, grad_out = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, grad_out))
    tiles = tiles or choose_tiles(q.shape[-1], q.dtype)
    return backward_kernels(q, k, v, grad_out, lse, backward_delta(out, grad_out), is_causal, tiles, splits)


# --- per-shape plans: the eager hot path ------------------------------------------------------

class _Launch:
    """One kernel with its grid and every argument but the tensors fixed: its launch for one input
    layout, called with the tensors by the kernel's names for them. The first call goes through
    Triton's dispatcher, which compiles the kernel or finds it; later calls go straight to the
    compiled kernel's launcher, because the dispatcher re-derives the specialisation key from every
    argument on every call (see NOTES.md for what that costs). Valid only for tensors with the
    layout and 16-byte alignment of the first call's."""

    def __init__(self, kernel, grid: tuple, scalars: dict, constexprs: dict, options: dict):
        fixed = [*scalars, *constexprs]
        # The compiled launcher takes every argument positionally: the tensors (named at each
        # call), then the fixed ones, which must therefore be the signature's last, in order.
        if fixed != kernel.arg_names[-len(fixed):]:
            raise ValueError(f"{fixed} are not the last arguments of {kernel.arg_names}, in order")
        self.kernel, self.grid, self.scalars, self.constexprs, self.options = kernel, grid, scalars, constexprs, options
        self.tensor_names = tuple(kernel.arg_names[:-len(fixed)])
        self.tail = (*scalars.values(), *constexprs.values())
        self.launcher = None

    def __call__(self, **tensors) -> None:
        if self.launcher is not None:
            self.launcher(*(tensors[name] for name in self.tensor_names), *self.tail)
            return
        compiled = self.kernel[self.grid](**tensors, **self.scalars, **self.constexprs, **self.options)
        if not interpreting():
            self.launcher = compiled[(*self.grid, 1, 1)[:3]]      # its launcher takes all three sizes


def _sm_count(device: torch.device) -> int:
    return _sm_count_of(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _sm_count_of(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


# Smallest tile fit_to_grid shrinks to: in a batch-1 sweep on the H100 (bf16, d = 64 and 128,
# N = 1024 to 16384; NOTES.md) 64 x 64 with 4 warps was fastest for every kernel, and 32- or
# 16-row tiles were slower from N = 4096 on.
MIN_FIT_BLOCK = 64


def fit_to_grid(tiles: Tiles, batch: int, n_q: int, n_k: int, sms: int) -> Tiles:
    """The tuned tiles (chosen at batch 16 or 4) with the dimension that sets a kernel's program
    count halved, and at most 4 warps, until the grid has a program for every SM or the tile
    reaches MIN_FIT_BLOCK. At batch 1 and N = 2048, the bf16 forward's 128-query tiles give 16
    programs on 132 SMs."""
    def fit(t: KernelTiles | None, n: int, big: str, small: str) -> KernelTiles | None:
        while t is not None and batch * triton.cdiv(n, getattr(t, big)) < sms and getattr(t, big) > MIN_FIT_BLOCK:
            half = getattr(t, big) // 2
            t = replace(t, **{big: half, small: min(getattr(t, small), half)}, num_warps=min(t.num_warps, 4))
        return t
    return Tiles(fit(tiles.forward, n_q, "block_q", "block_k"), fit(tiles.dkdv, n_k, "block_k", "block_q"),
                 fit(tiles.dq, n_q, "block_q", "block_k"))


class _SplitForward:
    """The split-key forward as one launch for a plan: the partials' buffer, the part kernel, the
    combine kernel (called like the one-program forward's ``_Launch``)."""

    def __init__(self, q, k, v, out, lse, is_causal: bool, t: KernelTiles, splits: int):
        self.new_part = dict(size=(_part_numel(q, splits),), dtype=torch.float32, device=q.device)
        self.part = _Launch(_forward_part_kernel, *_forward_part_args(q, k, v, is_causal, t, splits), _options(t))
        self.combine = _Launch(_forward_combine_kernel, *_combine_args(out, lse, splits), {})

    def __call__(self, Q, K, V, O, L) -> None:  # noqa: N803 - the kernels' names for them
        part = torch.empty(**self.new_part)
        self.part(Q=Q, K=K, V=V, PART=part)
        self.combine(PART=part, O=O, L=L)


class _SplitLaunch:
    """A split backward kernel and its combine as one launch for a plan, called like the one-program
    kernel's ``_Launch`` with the tensors by the kernels' names (each of the two gets those it
    takes): a fresh fp32 buffer for the partials, the part kernel, then the combine."""

    def __init__(self, part: _Launch, combine: _Launch, part_numel: int, device: torch.device):
        self.part, self.combine = part, combine
        self.new_part = dict(size=(part_numel,), dtype=torch.float32, device=device)

    def __call__(self, **tensors) -> None:
        part = torch.empty(**self.new_part)
        self.part(**{name: tensors[name] for name in self.part.tensor_names if name != "PART"}, PART=part)
        self.combine(**{name: tensors[name] for name in self.combine.tensor_names if name != "PART"}, PART=part)


def _split_dkdv_launch(q, k, v, grad_out, lse, grad_k, grad_v, is_causal: bool, t: KernelTiles,
                       splits: int) -> _SplitLaunch:
    return _SplitLaunch(_Launch(_dkdv_part_kernel, *_dkdv_part_args(q, k, v, grad_out, lse, is_causal, t, splits),
                                _options(t)),
                        _Launch(_dkdv_combine_kernel, *_dkdv_combine_args(grad_k, grad_v, splits), {}),
                        2 * splits * k.numel(), q.device)


def _split_dq_launch(q, k, v, grad_out, lse, grad_q, is_causal: bool, t: KernelTiles, splits: int) -> _SplitLaunch:
    return _SplitLaunch(_Launch(_dq_part_kernel, *_dq_part_args(q, k, v, grad_out, lse, is_causal, t, splits),
                                _options(t)),
                        _Launch(_dq_combine_kernel, *_dq_combine_args(grad_q, splits), {}),
                        splits * q.numel(), q.device)


class _Plan:
    """Everything about one call of FlashAttentionTriton that depends only on the inputs' shapes,
    strides, dtype, device and causality: the tiles fitted to the grid, the output buffers' sizes
    and the kernels' launches (the backward's are made on its first call, per layout of dO)."""

    def __init__(self, q, k, v, is_causal: bool, splits: int | None = None,
                 split_backward: tuple[int, int] | None = None):
        batch, n_q, d = q.shape
        tiles = choose_tiles(d, q.dtype)
        if not interpreting():
            sms = _sm_count(q.device)
            tiles = fit_to_grid(tiles, batch, n_q, k.shape[1], sms)
            if splits is None:
                splits = forward_splits(tiles.forward, batch, n_q, k.shape[1], d, q.dtype, sms)
            if split_backward is None:
                split_backward = backward_splits(tiles, batch, n_q, k.shape[1], d, q.dtype, sms)
        self.tiles, self.is_causal, self.splits, self.n_k = tiles, is_causal, splits or 1, k.shape[1]
        # (dK/dV, dQ) slices of the split backward; forced by the caller, or 1 where the rule does
        # not run (the interpreter, which has no SM count).
        self.backward_splits = tuple(split_backward or (1, 1))
        self.new_out = dict(size=q.shape, dtype=q.dtype, device=q.device)
        self.new_lse = dict(size=(batch, n_q), dtype=torch.float32, device=q.device)
        out, lse = torch.empty(**self.new_out), torch.empty(**self.new_lse)
        if self.splits > 1:
            self.forward = _SplitForward(q, k, v, out, lse, is_causal, tiles.forward, self.splits)
        else:
            self.forward = _Launch(_flash_forward_kernel, *_forward_args(q, k, v, out, lse, is_causal, tiles.forward),
                                   _options(tiles.forward))
        self.backwards: dict = {}

    def programs(self) -> dict[str, int]:
        """Each kernel's program count (the grid) for this layout."""
        batch, n_q, _ = self.new_out["size"]
        t = self.tiles
        return {"forward": triton.cdiv(n_q, t.forward.block_q) * batch * self.splits,
                "dkdv": triton.cdiv(self.n_k, t.dkdv.block_k) * batch * self.backward_splits[0],
                "dq": triton.cdiv(n_q, t.dq.block_q) * batch * self.backward_splits[1]}

    def backward(self, q, k, v, out, grad_out, lse):
        """dQ, dK, dV through the launches for this layout of dO (made on first use)."""
        launches = self.backwards.get(grad_out.stride())
        if launches is None:
            launches = self.backwards[grad_out.stride()] = self._backward_launches(q, k, v, out, grad_out, lse)
        delta_launch, dkdv, dq = launches
        delta = torch.empty(**self.new_lse)
        delta_launch(O=out, DO=grad_out, DELTA=delta)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dkdv(Q=q, K=k, V=v, DO=grad_out, L=lse, DELTA=delta, DK=grad_k, DV=grad_v)
        dq(Q=q, K=k, V=v, DO=grad_out, L=lse, DELTA=delta, DQ=grad_q)
        return grad_q, grad_k, grad_v

    def _backward_launches(self, q, k, v, out, grad_out, lse):
        t, causal = self.tiles, self.is_causal
        delta = torch.empty(**self.new_lse)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dkdv_splits, dq_splits = self.backward_splits
        if dkdv_splits > 1:
            dkdv = _split_dkdv_launch(q, k, v, grad_out, lse, grad_k, grad_v, causal, t.dkdv, dkdv_splits)
        else:
            dkdv = _Launch(_flash_dkdv_kernel, *_dkdv_args(q, k, v, grad_out, lse, grad_k, grad_v, causal, t.dkdv),
                           _options(t.dkdv))
        if dq_splits > 1:
            dq = _split_dq_launch(q, k, v, grad_out, lse, grad_q, causal, t.dq, dq_splits)
        else:
            dq = _Launch(_flash_dq_kernel, *_dq_args(q, k, v, grad_out, lse, grad_q, causal, t.dq), _options(t.dq))
        return _Launch(_delta_kernel, *_delta_args(out, grad_out, delta), {}), dkdv, dq


_PLANS: dict = {}


def _plan(q, k, v, is_causal: bool) -> _Plan | None:
    """The cached plan for these inputs, or None where the plain path must run them: under
    torch.compile (which traces the plain launches), for a strided last dimension (the plain
    path copies it), and for pointers off 16-byte alignment (the compiled kernels assume it)."""
    if (torch.compiler.is_compiling() or not all(isinstance(t, torch.Tensor) for t in (q, k, v))
            or (q.data_ptr() | k.data_ptr() | v.data_ptr()) % 16):
        return None
    key = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.device,
           k.device, v.device, is_causal)
    plan = _PLANS.get(key)
    if plan is None:
        check_inputs(q, k, v, is_causal)
        _check_device(q)
        if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
            return None
        if len(_PLANS) >= 4096:       # many distinct shapes (varying lengths): start afresh
            _PLANS.clear()
        plan = _PLANS[key] = _Plan(q, k, v, is_causal)
    return plan


def describe_launch(q, k, v, is_causal: bool) -> dict:
    """What ``FlashAttentionTriton`` launches for these inputs (for benchmark records): each
    kernel's tiles and program count, the SM count, the key splits of the forward, the (dK/dV, dQ)
    slices of the backward and how fp32 products are computed."""
    plan = _plan(q, k, v, is_causal)
    if plan is None:
        return {}
    sms = _sm_count(q.device) if q.device.type == "cuda" else None
    return {"tiles": plan.tiles.to_json(), "splits": plan.splits, "backward_splits": list(plan.backward_splits),
            "programs": plan.programs(), "sms": sms,
            "products": _precision(q.dtype)}


class FlashAttentionTriton(torch.autograd.Function):
    """``FlashAttentionTriton.apply(q, k, v, is_causal=False) -> o``: Triton forward and Triton backward."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False):
        is_causal = causal_flag(is_causal)
        plan = _plan(q, k, v, is_causal)
        if plan is not None:
            out, lse = torch.empty(**plan.new_out), torch.empty(**plan.new_lse)
            plan.forward(Q=q, K=k, V=v, O=out, L=lse)
        else:
            check_inputs(q, k, v, is_causal)
            _check_device(q)
            out, lse = flash_forward_triton(q, k, v, is_causal)
        ctx.save_for_backward(lse, q, k, v, out)
        ctx.is_causal, ctx.plan = is_causal, plan
        return out

    @staticmethod
    def backward(ctx, grad_out):
        lse, q, k, v, out = ctx.saved_tensors
        if ctx.plan is not None and not torch.compiler.is_compiling():
            if grad_out.stride(-1) != 1:
                grad_out = grad_out.contiguous()
            if grad_out.data_ptr() % 16 == 0:
                return (*ctx.plan.backward(q, k, v, out, grad_out, lse), None)
        return (*flash_backward_triton(q, k, v, out, grad_out, lse, ctx.is_causal), None)


class FlashAttentionTritonPytorchBackward(FlashAttentionTriton):
    """The Triton forward with the compiled PyTorch backward (the required B4 path)."""

    @staticmethod
    def backward(ctx, grad_out):
        lse, q, k, v, out = ctx.saved_tensors
        return (*compiled_flash_backward()(q, k, v, out, grad_out, lse, ctx.is_causal), None)
