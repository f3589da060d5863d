"""FlashAttention-2's backward in Triton (B4): the kernels.

By recomputation from Q, K, V, dO, the saved L and D = rowsum(dO ∘ O) (``_delta_kernel``): one
program per *key* tile accumulates dK and dV over the query tiles (``_flash_dkdv_kernel``, scores
transposed); then a second kernel, one program per *query* tile walking the key tiles, computes dQ
(``_flash_dq_kernel``). No two programs write the same memory, at the price of computing S and dP
in both kernels (seven products instead of five): adding dQ across programs with atomics instead
cost more than the two products it saves (lab/attention/NOTES.md).

On short grids (batch 1, short N) both split the way the forward does: each key tile's query tiles
(dK/dV) or each query tile's key tiles (dQ) over several programs that write fp32 partials, which a
small kernel adds up; ``flash_tiles.backward_splits`` chooses how many. The grid order, the row
loads, the products and the masked ranges are the forward's (``flash_forward``).
"""
from __future__ import annotations

import triton
import triton.language as tl

from cs336_systems.attention.flash_forward import (LOG2_E, _entry, _load_rows, _mm, _second_accumulator,
                                                   _second_chunk, _store_rows, _tile_and_batch, _tile_mask,
                                                   _tile_split_and_batch)


@triton.jit
def _delta_kernel(O, DO, DELTA, stride_ob, stride_oh, stride_on, stride_dob, stride_doh, stride_don, stride_db,
                  n_batch, n_heads, n_rows, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK: tl.constexpr):
    """D = rowsum(dO ∘ O) in fp32 for BLOCK rows of one batch entry (one launch, where PyTorch
    takes four: two casts, a product and a sum)."""
    pid = tl.program_id(0)
    b = pid % n_batch
    rows = (pid // n_batch) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D_PAD)
    valid = rows < n_rows
    o_base, do_base = O + _entry(b, n_heads, stride_ob, stride_oh), DO + _entry(b, n_heads, stride_dob, stride_doh)
    o = _load_rows(o_base, rows, stride_on, offs_d, n_rows, D, True)
    do = _load_rows(do_base, rows, stride_don, offs_d, n_rows, D, True)
    tl.store(DELTA + b * stride_db + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1), mask=valid)


@triton.jit
def _dkdv_tiles(dk, dk2, dv, dv2, k, k2, v, v2, q_base, do_base, l_base, d_base, stride_qn, stride_don, offs_k, offs_d,
                offs_e, q_lo, q_hi, n_queries, qk_scale, D: tl.constexpr, D_PAD: tl.constexpr, D_HI: tl.constexpr,
                D_HI_PAD: tl.constexpr, BLOCK_Q: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
                PRECISION: tl.constexpr):
    """Add the contributions of query tiles [q_lo, q_hi) to one key tile's dK and dV (transposed
    scores); the ``2``s are the head dimension's second column chunk, where D_HI_PAD > 0."""
    for start in range(q_lo, q_hi, BLOCK_Q):
        offs_q = start + tl.arange(0, BLOCK_Q)
        q = _load_rows(q_base, offs_q, stride_qn, offs_d, n_queries, D, MASK)
        do = _load_rows(do_base, offs_q, stride_don, offs_d, n_queries, D, MASK)
        if MASK:
            in_range = offs_q < n_queries
            lse = tl.load(l_base + offs_q, mask=in_range, other=0.0)
            delta = tl.load(d_base + offs_q, mask=in_range, other=0.0)
        else:
            lse = tl.load(l_base + offs_q)
            delta = tl.load(d_base + offs_q)
        s_t = _mm(k, tl.trans(q), PRECISION)
        # dP before the exponentials: it does not depend on them, so the tensor cores can work on
        # it while the special-function units compute P.
        dp_t = _mm(v, tl.trans(do), PRECISION)
        if D_HI_PAD > 0:
            q2 = _load_rows(q_base + D_PAD, offs_q, stride_qn, offs_e, n_queries, D_HI, MASK)
            do2 = _load_rows(do_base + D_PAD, offs_q, stride_don, offs_e, n_queries, D_HI, MASK)
            s_t += _mm(k2, tl.trans(q2), PRECISION)
            dp_t += _mm(v2, tl.trans(do2), PRECISION)
        p_t = tl.exp2(s_t * qk_scale - lse[None, :] * LOG2_E)     # (keys, queries); log2 units
        if MASK:
            keep = in_range[None, :]
            if CAUSAL:
                keep = keep & (offs_q[None, :] >= offs_k[:, None])
            p_t = tl.where(keep, p_t, 0.0)
        dv += _mm(p_t.to(do.dtype), do, PRECISION)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk += _mm(ds_t, q, PRECISION)
        if D_HI_PAD > 0:
            dv2 += _mm(p_t.to(do2.dtype), do2, PRECISION)
            dk2 += _mm(ds_t, q2, PRECISION)
    return dk, dk2, dv, dv2


@triton.jit
def _flash_dkdv_kernel(Q, K, V, DO, L, DELTA, DK, DV, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh,
                       stride_kn, stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_don, stride_lb,
                       stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh, stride_dvn, n_batch, n_heads,
                       n_queries, n_keys, scale, qk_scale, D: tl.constexpr, D_PAD: tl.constexpr, D_HI: tl.constexpr,
                       D_HI_PAD: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
                       PRECISION: tl.constexpr):
    # torch.compile passes Python floats as fp64 scalars; fp64 would leak into the fp32 accumulators.
    qk_scale = tl.cast(qk_scale, tl.float32)
    scale = tl.cast(scale, tl.float32)
    k_tile, b = _tile_and_batch(tl.cdiv(n_keys, BLOCK_K), n_batch, False)
    k_lo = k_tile * BLOCK_K
    offs_k = k_lo + tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, D_PAD)
    k_valid = offs_k < n_keys
    k_base, v_base = K + _entry(b, n_heads, stride_kb, stride_kh), V + _entry(b, n_heads, stride_vb, stride_vh)
    q_base, do_base = Q + _entry(b, n_heads, stride_qb, stride_qh), DO + _entry(b, n_heads, stride_dob, stride_doh)
    k = _load_rows(k_base, offs_k, stride_kn, offs_d, n_keys, D, True)
    v = _load_rows(v_base, offs_k, stride_vn, offs_d, n_keys, D, True)
    k2, offs_e = _second_chunk(k_base, offs_k, stride_kn, n_keys, D_PAD, D_HI, D_HI_PAD, True)
    v2, _ = _second_chunk(v_base, offs_k, stride_vn, n_keys, D_PAD, D_HI, D_HI_PAD, True)
    l_base, d_base = L + b * stride_lb, DELTA + b * stride_lb
    dk = tl.zeros([BLOCK_K, D_PAD], tl.float32)
    dv = tl.zeros([BLOCK_K, D_PAD], tl.float32)
    dk2 = _second_accumulator(BLOCK_K, D_HI_PAD)
    dv2 = _second_accumulator(BLOCK_K, D_HI_PAD)
    full = (n_queries // BLOCK_Q) * BLOCK_Q
    if CAUSAL:
        # Queries before k_lo see none of these keys: skipped. The diagonal [k_lo, k_lo + BLOCK_K) is
        # masked; later whole tiles are not; a ragged last query tile is masked again.
        diag_hi = tl.minimum(k_lo + BLOCK_K, n_queries)
        rest_hi = tl.maximum(full, diag_hi)
        dk, dk2, dv, dv2 = _dkdv_tiles(dk, dk2, dv, dv2, k, k2, v, v2, q_base, do_base, l_base, d_base, stride_qn,
                                       stride_don, offs_k, offs_d, offs_e, k_lo, diag_hi, n_queries, qk_scale, D, D_PAD,
                                       D_HI, D_HI_PAD, BLOCK_Q, True, True, PRECISION)
        dk, dk2, dv, dv2 = _dkdv_tiles(dk, dk2, dv, dv2, k, k2, v, v2, q_base, do_base, l_base, d_base, stride_qn,
                                       stride_don, offs_k, offs_d, offs_e, diag_hi, rest_hi, n_queries, qk_scale, D,
                                       D_PAD, D_HI, D_HI_PAD, BLOCK_Q, False, True, PRECISION)
        dk, dk2, dv, dv2 = _dkdv_tiles(dk, dk2, dv, dv2, k, k2, v, v2, q_base, do_base, l_base, d_base, stride_qn,
                                       stride_don, offs_k, offs_d, offs_e, rest_hi, n_queries, n_queries, qk_scale, D,
                                       D_PAD, D_HI, D_HI_PAD, BLOCK_Q, True, True, PRECISION)
    else:
        dk, dk2, dv, dv2 = _dkdv_tiles(dk, dk2, dv, dv2, k, k2, v, v2, q_base, do_base, l_base, d_base, stride_qn,
                                       stride_don, offs_k, offs_d, offs_e, 0, full, n_queries, qk_scale, D, D_PAD, D_HI,
                                       D_HI_PAD, BLOCK_Q, False, False, PRECISION)
        dk, dk2, dv, dv2 = _dkdv_tiles(dk, dk2, dv, dv2, k, k2, v, v2, q_base, do_base, l_base, d_base, stride_qn,
                                       stride_don, offs_k, offs_d, offs_e, full, n_queries, n_queries, qk_scale, D,
                                       D_PAD, D_HI, D_HI_PAD, BLOCK_Q, True, False, PRECISION)
    _store_rows(DK + _entry(b, n_heads, stride_dkb, stride_dkh), offs_k, stride_dkn, offs_d, offs_e, k_valid, dk * scale,
                dk2 * scale, D, D_PAD, D_HI, D_HI_PAD)
    _store_rows(DV + _entry(b, n_heads, stride_dvb, stride_dvh), offs_k, stride_dvn, offs_d, offs_e, k_valid, dv, dv2,
                D, D_PAD, D_HI, D_HI_PAD)


@triton.jit
def _dq_tiles(dq, dq2, q, q2, do, do2, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, offs_e, k_lo,
              k_hi, n_keys, qk_scale, D: tl.constexpr, D_PAD: tl.constexpr, D_HI: tl.constexpr, D_HI_PAD: tl.constexpr,
              BLOCK_K: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """Add the contributions of key tiles [k_lo, k_hi) to one query tile's dQ (and its second
    column chunk, where D_HI_PAD > 0)."""
    for start in range(k_lo, k_hi, BLOCK_K):
        offs_k = start + tl.arange(0, BLOCK_K)
        k = _load_rows(k_base, offs_k, stride_kn, offs_d, n_keys, D, MASK)
        v = _load_rows(v_base, offs_k, stride_vn, offs_d, n_keys, D, MASK)
        s = _mm(q, tl.trans(k), PRECISION)
        dp = _mm(do, tl.trans(v), PRECISION)
        if D_HI_PAD > 0:
            k2 = _load_rows(k_base + D_PAD, offs_k, stride_kn, offs_e, n_keys, D_HI, MASK)
            v2 = _load_rows(v_base + D_PAD, offs_k, stride_vn, offs_e, n_keys, D_HI, MASK)
            s += _mm(q2, tl.trans(k2), PRECISION)
            dp += _mm(do2, tl.trans(v2), PRECISION)
        p = tl.exp2(s * qk_scale - lse[:, None] * LOG2_E)
        if MASK:
            keep = (offs_k < n_keys)[None, :]
            if CAUSAL:
                keep = keep & (offs_q[:, None] >= offs_k[None, :])
            p = tl.where(keep, p, 0.0)
        ds = (p * (dp - delta[:, None])).to(k.dtype)
        dq += _mm(ds, k, PRECISION)
        if D_HI_PAD > 0:
            dq2 += _mm(ds, k2, PRECISION)
    return dq, dq2


@triton.jit
def _flash_dq_kernel(Q, K, V, DO, L, DELTA, DQ, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                     stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_don, stride_lb, stride_dqb,
                     stride_dqh, stride_dqn, n_batch, n_heads, n_queries, n_keys, scale, qk_scale, D: tl.constexpr,
                     D_PAD: tl.constexpr, D_HI: tl.constexpr, D_HI_PAD: tl.constexpr, BLOCK_Q: tl.constexpr,
                     BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    # torch.compile passes Python floats as fp64 scalars; fp64 would leak into the fp32 accumulators.
    qk_scale = tl.cast(qk_scale, tl.float32)
    q_tile, b = _tile_and_batch(tl.cdiv(n_queries, BLOCK_Q), n_batch, CAUSAL)
    q_lo = q_tile * BLOCK_Q
    offs_q = q_lo + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D_PAD)
    q_valid = offs_q < n_queries
    q_base, do_base = Q + _entry(b, n_heads, stride_qb, stride_qh), DO + _entry(b, n_heads, stride_dob, stride_doh)
    q = _load_rows(q_base, offs_q, stride_qn, offs_d, n_queries, D, True)
    do = _load_rows(do_base, offs_q, stride_don, offs_d, n_queries, D, True)
    q2, offs_e = _second_chunk(q_base, offs_q, stride_qn, n_queries, D_PAD, D_HI, D_HI_PAD, True)
    do2, _ = _second_chunk(do_base, offs_q, stride_don, n_queries, D_PAD, D_HI, D_HI_PAD, True)
    lse = tl.load(L + b * stride_lb + offs_q, mask=q_valid, other=0.0)
    delta = tl.load(DELTA + b * stride_lb + offs_q, mask=q_valid, other=0.0)
    k_base, v_base = K + _entry(b, n_heads, stride_kb, stride_kh), V + _entry(b, n_heads, stride_vb, stride_vh)
    dq = tl.zeros([BLOCK_Q, D_PAD], tl.float32)
    dq2 = _second_accumulator(BLOCK_Q, D_HI_PAD)
    if CAUSAL:
        dq, dq2 = _dq_tiles(dq, dq2, q, q2, do, do2, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d,
                            offs_e, 0, q_lo, n_keys, qk_scale, D, D_PAD, D_HI, D_HI_PAD, BLOCK_K, False, True, PRECISION)
        dq, dq2 = _dq_tiles(dq, dq2, q, q2, do, do2, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d,
                            offs_e, q_lo, tl.minimum(q_lo + BLOCK_Q, n_keys), n_keys, qk_scale, D, D_PAD, D_HI,
                            D_HI_PAD, BLOCK_K, True, True, PRECISION)
    else:
        full = (n_keys // BLOCK_K) * BLOCK_K
        dq, dq2 = _dq_tiles(dq, dq2, q, q2, do, do2, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d,
                            offs_e, 0, full, n_keys, qk_scale, D, D_PAD, D_HI, D_HI_PAD, BLOCK_K, False, False,
                            PRECISION)
        dq, dq2 = _dq_tiles(dq, dq2, q, q2, do, do2, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d,
                            offs_e, full, n_keys, n_keys, qk_scale, D, D_PAD, D_HI, D_HI_PAD, BLOCK_K, True, False,
                            PRECISION)
    _store_rows(DQ + _entry(b, n_heads, stride_dqb, stride_dqh), offs_q, stride_dqn, offs_d, offs_e, q_valid, dq * scale,
                dq2 * scale, D, D_PAD, D_HI, D_HI_PAD)


# --- backward with each tile's range split across programs (short grids) ----------------------

@triton.jit
def _clamp(x, lo, hi):
    return tl.minimum(tl.maximum(x, lo), hi)


@triton.jit
def _dkdv_part_kernel(Q, K, V, DO, L, DELTA, PART, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                      stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_don, stride_lb, n_batch,
                      n_heads, n_queries, n_keys, qk_scale, D: tl.constexpr, D_PAD: tl.constexpr,
                      BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, SPLITS: tl.constexpr, CAUSAL: tl.constexpr,
                      PRECISION: tl.constexpr):
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
    offs_d = tl.arange(0, D_PAD)
    k_base, v_base = K + _entry(b, n_heads, stride_kb, stride_kh), V + _entry(b, n_heads, stride_vb, stride_vh)
    q_base, do_base = Q + _entry(b, n_heads, stride_qb, stride_qh), DO + _entry(b, n_heads, stride_dob, stride_doh)
    k = _load_rows(k_base, offs_k, stride_kn, offs_d, n_keys, D, True)
    v = _load_rows(v_base, offs_k, stride_vn, offs_d, n_keys, D, True)
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
    dk = tl.zeros([BLOCK_K, D_PAD], tl.float32)
    dv = tl.zeros([BLOCK_K, D_PAD], tl.float32)
    if CAUSAL:
        diag_hi = _clamp(k_lo + BLOCK_K, lo, hi)
        rest_hi = _clamp(full, diag_hi, hi)
        dk, _, dv, _ = _dkdv_tiles(dk, 0.0, dv, 0.0, k, 0.0, v, 0.0, q_base, do_base, l_base, d_base, stride_qn,
                                   stride_don, offs_k, offs_d, 0, lo, diag_hi, n_queries, qk_scale, D, D_PAD, 0, 0,
                                   BLOCK_Q, True, True, PRECISION)
        dk, _, dv, _ = _dkdv_tiles(dk, 0.0, dv, 0.0, k, 0.0, v, 0.0, q_base, do_base, l_base, d_base, stride_qn,
                                   stride_don, offs_k, offs_d, 0, diag_hi, rest_hi, n_queries, qk_scale, D, D_PAD, 0, 0,
                                   BLOCK_Q, False, True, PRECISION)
        # The ragged end (at most one tile, past `full`) lies in the slice that reaches n_queries;
        # written as [.., n_queries) rather than [rest_hi, hi), with which ptxas spilled 128-136
        # bytes at bf16 d = 64 (0-4 this way; the unsplit kernel 0).
        ragged_lo = tl.where(hi < n_queries, n_queries, rest_hi)
        dk, _, dv, _ = _dkdv_tiles(dk, 0.0, dv, 0.0, k, 0.0, v, 0.0, q_base, do_base, l_base, d_base, stride_qn,
                                   stride_don, offs_k, offs_d, 0, ragged_lo, n_queries, n_queries, qk_scale, D, D_PAD, 0, 0,
                                   BLOCK_Q, True, True, PRECISION)
    else:
        mid = _clamp(full, lo, hi)
        dk, _, dv, _ = _dkdv_tiles(dk, 0.0, dv, 0.0, k, 0.0, v, 0.0, q_base, do_base, l_base, d_base, stride_qn,
                                   stride_don, offs_k, offs_d, 0, lo, mid, n_queries, qk_scale, D, D_PAD, 0, 0,
                                   BLOCK_Q, False, False, PRECISION)
        dk, _, dv, _ = _dkdv_tiles(dk, 0.0, dv, 0.0, k, 0.0, v, 0.0, q_base, do_base, l_base, d_base, stride_qn,
                                   stride_don, offs_k, offs_d, 0, mid, hi, n_queries, qk_scale, D, D_PAD, 0, 0,
                                   BLOCK_Q, True, False, PRECISION)
    row = (split * n_batch + b) * n_keys + offs_k
    at = row[:, None] * D + offs_d[None, :]
    k_valid = _tile_mask(offs_k < n_keys, offs_d, D)
    tl.store(PART + at, dk, mask=k_valid)
    tl.store(PART + SPLITS * n_batch * n_keys * D + at, dv, mask=k_valid)


@triton.jit
def _dq_part_kernel(Q, K, V, DO, L, DELTA, PART, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_don, stride_lb, n_batch, n_heads,
                    n_queries, n_keys, qk_scale, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_Q: tl.constexpr,
                    BLOCK_K: tl.constexpr, SPLITS: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """One query tile's dQ (unscaled) over one of SPLITS slices of its key tiles, in fp32 into
    PART (SPLITS, batch, Nq, D); ``_dq_combine_kernel`` adds the slices. The key slices are cut as
    in ``_forward_part_kernel``."""
    qk_scale = tl.cast(qk_scale, tl.float32)
    q_tile, split, b = _tile_split_and_batch(tl.cdiv(n_queries, BLOCK_Q), n_batch, SPLITS, CAUSAL)
    q_lo = q_tile * BLOCK_Q
    offs_q = q_lo + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D_PAD)
    q_valid = offs_q < n_queries
    q_base, do_base = Q + _entry(b, n_heads, stride_qb, stride_qh), DO + _entry(b, n_heads, stride_dob, stride_doh)
    q = _load_rows(q_base, offs_q, stride_qn, offs_d, n_queries, D, True)
    do = _load_rows(do_base, offs_q, stride_don, offs_d, n_queries, D, True)
    lse = tl.load(L + b * stride_lb + offs_q, mask=q_valid, other=0.0)
    delta = tl.load(DELTA + b * stride_lb + offs_q, mask=q_valid, other=0.0)
    k_base, v_base = K + _entry(b, n_heads, stride_kb, stride_kh), V + _entry(b, n_heads, stride_vb, stride_vh)
    key_end = tl.minimum(q_lo + BLOCK_Q, n_keys) if CAUSAL else n_keys
    n_tiles = tl.cdiv(key_end, BLOCK_K)
    lo = (split * n_tiles // SPLITS) * BLOCK_K
    hi = tl.minimum(((split + 1) * n_tiles // SPLITS) * BLOCK_K, key_end)
    mid = _clamp(q_lo if CAUSAL else (n_keys // BLOCK_K) * BLOCK_K, lo, hi)
    dq = tl.zeros([BLOCK_Q, D_PAD], tl.float32)
    dq, _ = _dq_tiles(dq, 0.0, q, 0.0, do, 0.0, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, 0,
                      lo, mid, n_keys, qk_scale, D, D_PAD, 0, 0, BLOCK_K, False, CAUSAL, PRECISION)
    dq, _ = _dq_tiles(dq, 0.0, q, 0.0, do, 0.0, lse, delta, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, 0,
                      mid, hi, n_keys, qk_scale, D, D_PAD, 0, 0, BLOCK_K, True, CAUSAL, PRECISION)
    row = (split * n_batch + b) * n_queries + offs_q
    tl.store(PART + row[:, None] * D + offs_d[None, :], dq, mask=_tile_mask(q_valid, offs_d, D))


@triton.jit
def _sum_slices(part, rows, valid, offs_d, slice_rows, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    """The sum over SPLITS slices of fp32 (BLOCK, D) tiles at ``rows`` of ``part``, whose slices are
    ``slice_rows`` rows apart."""
    total = tl.zeros([BLOCK, D_PAD], tl.float32)
    for s in tl.static_range(SPLITS):
        total += tl.load(part + (s * slice_rows + rows)[:, None] * D + offs_d[None, :], mask=_tile_mask(valid, offs_d, D),
                         other=0.0)
    return total


@triton.jit
def _dkdv_combine_kernel(PART, DK, DV, stride_dkb, stride_dkh, stride_dkn, stride_dvb, stride_dvh, stride_dvn,
                         n_batch, n_heads, n_keys, scale, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK: tl.constexpr,
                         SPLITS: tl.constexpr):
    """dK (scaled) and dV of BLOCK key rows: the sums of ``_dkdv_part_kernel``'s slices."""
    scale = tl.cast(scale, tl.float32)
    pid = tl.program_id(0)
    b = pid % n_batch
    rows = (pid // n_batch) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D_PAD)
    valid = rows < n_keys
    slice_rows = n_batch * n_keys
    dk = _sum_slices(PART, b * n_keys + rows, valid, offs_d, slice_rows, D, D_PAD, BLOCK, SPLITS)
    dv = _sum_slices(PART + SPLITS * slice_rows * D, b * n_keys + rows, valid, offs_d, slice_rows, D, D_PAD, BLOCK, SPLITS)
    _store_rows(DK + _entry(b, n_heads, stride_dkb, stride_dkh), rows, stride_dkn, offs_d, 0, valid, dk * scale, 0.0, D,
                D_PAD, 0, 0)
    _store_rows(DV + _entry(b, n_heads, stride_dvb, stride_dvh), rows, stride_dvn, offs_d, 0, valid, dv, 0.0, D, D_PAD,
                0, 0)


@triton.jit
def _dq_combine_kernel(PART, DQ, stride_dqb, stride_dqh, stride_dqn, n_batch, n_heads, n_queries, scale,
                       D: tl.constexpr, D_PAD: tl.constexpr, BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    """dQ (scaled) of BLOCK query rows: the sum of ``_dq_part_kernel``'s slices."""
    scale = tl.cast(scale, tl.float32)
    pid = tl.program_id(0)
    b = pid % n_batch
    rows = (pid // n_batch) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D_PAD)
    valid = rows < n_queries
    dq = _sum_slices(PART, b * n_queries + rows, valid, offs_d, n_batch * n_queries, D, D_PAD, BLOCK, SPLITS)
    _store_rows(DQ + _entry(b, n_heads, stride_dqb, stride_dqh), rows, stride_dqn, offs_d, 0, valid, dq * scale, 0.0, D,
                D_PAD, 0, 0)
