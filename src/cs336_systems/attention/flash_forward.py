"""FlashAttention-2's forward in Triton (B3): the kernels, and the helpers the backward shares.

Layout: q (batch, Nq, d); k, v (batch, Nk, d); any row strides; or each with a heads axis after
the batch, (batch, heads, N, d), any strides but the last (``_entry``: the model's view of its
projections is read where it lies). d is any multiple of 8 up to 256.
Along d a tile is one chunk D_PAD wide, d rounded up to a power of two, or, where d is not one and
two chunks make fewer columns (``flash_tiles.head_chunks``: 80 as 64 + 16), a chunk D_PAD wide and
a second D_HI_PAD wide beside it: each product over d is then two ``tl.dot``s and each accumulator
two tiles, so no product spends its work on padding. Columns past d are masked (``_tile_mask``):
read as zeros, never written. The split kernels and the combines keep one padded chunk: they run
only on short grids. The launch grid is one-dimensional over
(tile, batch entry), longest causal tiles first (``_tile_and_batch``).

One program per query tile: stream key tiles, keep the running max ``m``, denominator ``l`` and
output accumulator in fp32 registers, and write O and the log-sum-exp L (natural log, fp32).
Softmax exponentials use ``exp2`` with log2(e) folded into the score scale.

When the grid has too few programs to fill the GPU (batch 1, short N), one query tile walking all
N keys is the critical path. Then each query tile's key tiles are split over several programs
(``_forward_part_kernel``) that write partial (accumulator, m, l) in fp32, and a second kernel
combines them (``_forward_combine_kernel``); ``flash_tiles.forward_splits`` chooses how many.

Every kernel here and in ``flash_backward`` walks its tiles in two or three ranges, each a call of
its ``_*_tiles`` loop with ``MASK`` fixed: tiles that need no mask at all, the causal diagonal, and
a ragged last tile when a length is not a multiple of the tile. The mask arithmetic runs only in
the last two, and tiles wholly above the causal diagonal are never visited. Plain pointer
arithmetic (no block pointers) keeps the kernels working on the Triton of the GPU machines (3.6)
and the newer one CI installs (where ``tl.make_block_ptr`` is gone), and under
``TRITON_INTERPRET=1`` on a CPU. Triton 3.6's interpreter needs NumPy < 2.4: it holds every scalar
(a program id, an int argument) as a one-element array and turns loop bounds into ints with
``int(array)``, which NumPy 2.4 refuses; later Tritons squeeze the array first.

The kernels' tiles come from ``flash_tiles``; ``flash_plan`` launches them.
"""
from __future__ import annotations

import triton
import triton.language as tl

# log2(e): the kernels work in base 2 (``exp2``) and return L in natural log. A constexpr, because
# compiled kernels may read only constexpr globals; host code reads ``LOG2_E.value``.
LOG2_E = tl.constexpr(1.4426950408889634)
# Added to masked scores: exp2 of it is exactly 0, and no inf - inf can occur. A constexpr, because
# compiled kernels may read only constexpr globals (the interpreter is laxer).
MASKED = tl.constexpr(-1.0e6)


# --- shared with the backward -----------------------------------------------------------------

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
def _entry(b, n_heads, stride_b, stride_h):
    """Where batch entry ``b`` of a tensor begins: entry b is head ``b % n_heads`` of batch element
    ``b // n_heads`` (a (batch, heads, N, d) tensor, any strides: the model's view of its (batch, N,
    heads·d) projections is read in place), or with n_heads 1 batch element b of a (batch, N, d) one."""
    return (b // n_heads) * stride_b + (b % n_heads) * stride_h


@triton.jit
def _tile_mask(rows_ok, offs_d, D: tl.constexpr):
    """Which elements of a (rows, D_PAD) tile exist: rows where ``rows_ok``, and the first D of its
    ``offs_d`` columns. A head dimension that is not a power of two is padded to one (``tl.arange``
    takes only powers of two), and the padding columns must never be written."""
    mask = rows_ok[:, None]
    if offs_d.shape[0] != D:
        mask = mask & (offs_d < D)[None, :]
    return mask


@triton.jit
def _load_rows(base, offs_rows, stride_row, offs_d, n_rows, D: tl.constexpr, MASK: tl.constexpr):
    """The (rows, D_PAD) tile at ``base``; with ``MASK``, rows at or past ``n_rows`` read as zeros.
    Padding columns past the head dimension D always read as zeros, so they add nothing to a product
    over d (Q·Kᵀ, dO·Vᵀ, rowsum(dO ∘ O)) and leave zeros in the padding columns of the others."""
    ptrs = base + offs_rows[:, None] * stride_row + offs_d[None, :]
    if MASK:
        tile = tl.load(ptrs, mask=_tile_mask(offs_rows < n_rows, offs_d, D), other=0.0)
    elif offs_d.shape[0] != D:
        tile = tl.load(ptrs, mask=(offs_d < D)[None, :], other=0.0)
    else:
        tile = tl.load(ptrs)
    return tile


@triton.jit
def _mm(a, b, PRECISION: tl.constexpr):
    """``tl.dot`` with the product precision chosen on the host (see ``_precision``)."""
    if PRECISION == "upcast":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=PRECISION)


# --- forward ----------------------------------------------------------------------------------

@triton.jit
def _forward_tiles(acc, acc2, l, m, q, q2, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, offs_e, key_lo, key_hi,
                   n_keys, qk_scale, D: tl.constexpr, D_PAD: tl.constexpr, D_HI: tl.constexpr, D_HI_PAD: tl.constexpr,
                   BLOCK_K: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """Fold key tiles [key_lo, key_hi) into the running (acc, acc2, l, m) of one query tile (acc2
    and q2: the second column chunk, where D_HI_PAD > 0; see ``_second_chunk``)."""
    for start in range(key_lo, key_hi, BLOCK_K):
        offs_k = start + tl.arange(0, BLOCK_K)
        k = _load_rows(k_base, offs_k, stride_kn, offs_d, n_keys, D, MASK)
        v = _load_rows(v_base, offs_k, stride_vn, offs_d, n_keys, D, MASK)
        s = _mm(q, tl.trans(k), PRECISION)
        if D_HI_PAD > 0:
            k2 = _load_rows(k_base + D_PAD, offs_k, stride_kn, offs_e, n_keys, D_HI, MASK)
            v2 = _load_rows(v_base + D_PAD, offs_k, stride_vn, offs_e, n_keys, D_HI, MASK)
            s += _mm(q2, tl.trans(k2), PRECISION)
        s = s * qk_scale                                        # log2 units
        if MASK:
            keep = (offs_k < n_keys)[None, :]
            if CAUSAL:
                keep = keep & (offs_q[:, None] >= offs_k[None, :])
            s = s + tl.where(keep, 0.0, MASKED)
        p, alpha, l, m = _softmax_fold(l, m, s)
        acc = acc * alpha[:, None] + _mm(p.to(v.dtype), v, PRECISION)
        if D_HI_PAD > 0:
            acc2 = acc2 * alpha[:, None] + _mm(p.to(v2.dtype), v2, PRECISION)
    return acc, acc2, l, m


@triton.jit
def _softmax_fold(l, m, s):
    """Fold one tile of scores ``s`` (log2 units) into the running (l, m): the tile's probabilities
    against the new max, the factor that rescales what was accumulated before, and the new (l, m)."""
    m_new = tl.maximum(m, tl.max(s, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(s - m_new[:, None])
    return p, alpha, l * alpha + tl.sum(p, 1), m_new


@triton.jit
def _second_chunk(base, offs_rows, stride_row, n_rows, D_PAD: tl.constexpr, D_HI: tl.constexpr,
                  D_HI_PAD: tl.constexpr, MASK: tl.constexpr):
    """The head dimension's second column chunk of a row tile, where it has one (D_HI_PAD > 0):
    columns [D_PAD, D_PAD + D_HI_PAD) of which the first D_HI exist, and their offsets. Without
    one, a placeholder (the kernels touch it only under ``D_HI_PAD > 0``)."""
    if D_HI_PAD > 0:
        offs_e = tl.arange(0, D_HI_PAD)
        tile = _load_rows(base + D_PAD, offs_rows, stride_row, offs_e, n_rows, D_HI, MASK)
    else:
        offs_e = 0
        tile = 0.0
    return tile, offs_e


@triton.jit
def _store_rows(base, offs_rows, stride_row, offs_d, offs_e, valid, tile, tile2, D: tl.constexpr, D_PAD: tl.constexpr,
                D_HI: tl.constexpr, D_HI_PAD: tl.constexpr):
    """Store a row tile (and its second column chunk, where D_HI_PAD > 0) in the output's dtype."""
    at = base + offs_rows[:, None] * stride_row
    tl.store(at + offs_d[None, :], tile.to(base.dtype.element_ty), mask=_tile_mask(valid, offs_d, D))
    if D_HI_PAD > 0:
        tl.store(at + D_PAD + offs_e[None, :], tile2.to(base.dtype.element_ty), mask=_tile_mask(valid, offs_e, D_HI))


@triton.jit
def _second_accumulator(ROWS: tl.constexpr, D_HI_PAD: tl.constexpr):
    """Zeros for a second column chunk's fp32 accumulator, or a placeholder where there is none."""
    if D_HI_PAD > 0:
        acc = tl.zeros([ROWS, D_HI_PAD], tl.float32)
    else:
        acc = 0.0
    return acc


@triton.jit
def _flash_forward_kernel(Q, K, V, O, L, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                          stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_on, stride_lb,
                          n_batch, n_heads, n_queries, n_keys, qk_scale,
                          D: tl.constexpr, D_PAD: tl.constexpr, D_HI: tl.constexpr, D_HI_PAD: tl.constexpr,
                          BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    # torch.compile passes Python floats as fp64 scalars; fp64 would leak into the fp32 accumulators.
    qk_scale = tl.cast(qk_scale, tl.float32)
    q_tile, b = _tile_and_batch(tl.cdiv(n_queries, BLOCK_Q), n_batch, CAUSAL)
    q_lo = q_tile * BLOCK_Q
    offs_q = q_lo + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, D_PAD)
    q_valid = offs_q < n_queries
    q_base = Q + _entry(b, n_heads, stride_qb, stride_qh)
    k_base, v_base = K + _entry(b, n_heads, stride_kb, stride_kh), V + _entry(b, n_heads, stride_vb, stride_vh)
    q = _load_rows(q_base, offs_q, stride_qn, offs_d, n_queries, D, True)
    q2, offs_e = _second_chunk(q_base, offs_q, stride_qn, n_queries, D_PAD, D_HI, D_HI_PAD, True)

    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, D_PAD], tl.float32)
    acc2 = _second_accumulator(BLOCK_Q, D_HI_PAD)
    if CAUSAL:
        # Keys before the tile's first query: every score is visible, no mask. Then the diagonal
        # keys [q_lo, q_lo + BLOCK_Q), masked; keys after them are never loaded.
        acc, acc2, l, m = _forward_tiles(acc, acc2, l, m, q, q2, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d,
                                         offs_e, 0, q_lo, n_keys, qk_scale, D, D_PAD, D_HI, D_HI_PAD, BLOCK_K, False,
                                         True, PRECISION)
        acc, acc2, l, m = _forward_tiles(acc, acc2, l, m, q, q2, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d,
                                         offs_e, q_lo, tl.minimum(q_lo + BLOCK_Q, n_keys), n_keys, qk_scale, D, D_PAD,
                                         D_HI, D_HI_PAD, BLOCK_K, True, True, PRECISION)
    else:
        full = (n_keys // BLOCK_K) * BLOCK_K
        acc, acc2, l, m = _forward_tiles(acc, acc2, l, m, q, q2, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d,
                                         offs_e, 0, full, n_keys, qk_scale, D, D_PAD, D_HI, D_HI_PAD, BLOCK_K, False,
                                         False, PRECISION)
        acc, acc2, l, m = _forward_tiles(acc, acc2, l, m, q, q2, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d,
                                         offs_e, full, n_keys, n_keys, qk_scale, D, D_PAD, D_HI, D_HI_PAD, BLOCK_K, True,
                                         False, PRECISION)

    _store_rows(O + _entry(b, n_heads, stride_ob, stride_oh), offs_q, stride_on, offs_d, offs_e, q_valid,
                acc / l[:, None], acc2 / l[:, None], D, D_PAD, D_HI, D_HI_PAD)
    tl.store(L + b * stride_lb + offs_q, (m + tl.log2(l)) / LOG2_E, mask=q_valid)


# --- forward with the keys split across programs (short grids) --------------------------------

@triton.jit
def _forward_part_kernel(Q, K, V, PART, stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
                         stride_vb, stride_vh, stride_vn, n_batch, n_heads, n_queries, n_keys, qk_scale,
                         D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, SPLITS: tl.constexpr,
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
    offs_d = tl.arange(0, D_PAD)
    q = _load_rows(Q + _entry(b, n_heads, stride_qb, stride_qh), offs_q, stride_qn, offs_d, n_queries, D, True)
    k_base, v_base = K + _entry(b, n_heads, stride_kb, stride_kh), V + _entry(b, n_heads, stride_vb, stride_vh)
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
    acc = tl.zeros([BLOCK_Q, D_PAD], tl.float32)
    # one column chunk (D_HI_PAD = 0): short grids are not where padding columns cost much
    acc, _, l, m = _forward_tiles(acc, 0.0, l, m, q, 0.0, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, 0, lo,
                                  mid, n_keys, qk_scale, D, D_PAD, 0, 0, BLOCK_K, False, CAUSAL, PRECISION)
    acc, _, l, m = _forward_tiles(acc, 0.0, l, m, q, 0.0, k_base, v_base, stride_kn, stride_vn, offs_q, offs_d, 0, mid,
                                  hi, n_keys, qk_scale, D, D_PAD, 0, 0, BLOCK_K, True, CAUSAL, PRECISION)
    row = (split * n_batch + b) * n_queries + offs_q
    q_valid = offs_q < n_queries
    tl.store(ACC + row[:, None] * D + offs_d[None, :], acc, mask=_tile_mask(q_valid, offs_d, D))
    tl.store(M + row, m, mask=q_valid)
    tl.store(LS + row, l, mask=q_valid)


@triton.jit
def _forward_combine_kernel(PART, O, L, stride_ob, stride_oh, stride_on, stride_lb, n_batch, n_heads, n_queries,
                            D: tl.constexpr, D_PAD: tl.constexpr, BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    """O and L (natural log) of BLOCK rows from the SPLITS partial (acc, m, l): rescale each to the
    rows' overall max, add, divide. A slice with no keys has m = -inf and weight 0."""
    ACC = PART
    M = ACC + SPLITS * n_batch * n_queries * D
    LS = M + SPLITS * n_batch * n_queries
    pid = tl.program_id(0)
    b = pid % n_batch
    rows = (pid // n_batch) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D_PAD)
    valid = rows < n_queries
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for s in tl.static_range(SPLITS):
        m = tl.maximum(m, tl.load(M + (s * n_batch + b) * n_queries + rows, mask=valid, other=0.0))
    l = tl.zeros([BLOCK], tl.float32)
    acc = tl.zeros([BLOCK, D_PAD], tl.float32)
    for s in tl.static_range(SPLITS):
        at = (s * n_batch + b) * n_queries + rows
        weight = tl.exp2(tl.load(M + at, mask=valid, other=0.0) - m)
        l += weight * tl.load(LS + at, mask=valid, other=0.0)
        acc += weight[:, None] * tl.load(ACC + at[:, None] * D + offs_d[None, :], mask=_tile_mask(valid, offs_d, D), other=0.0)
    _store_rows(O + _entry(b, n_heads, stride_ob, stride_oh), rows, stride_on, offs_d, 0, valid, acc / l[:, None], 0.0,
                D, D_PAD, 0, 0)
    tl.store(L + b * stride_lb + rows, (m + tl.log2(l)) / LOG2_E, mask=valid)
