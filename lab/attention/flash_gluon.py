"""Hopper-only FlashAttention backward kernels in Gluon: dK/dV and dQ with TMA loads
into a ring of shared-memory stages and asynchronous warpgroup MMAs (wgmma), and warp-specialised
versions of both (a TMA loader warp beside the MMA warpgroups). None is used by
``FlashAttentionTriton``: on the H100 only the warp-specialised dK/dV with one consumer is faster
than the ``tl`` kernel, by 4-6 % (NOTES.md, "Gluon warp-specialised dK/dV"), and the dQ side did
not follow; they stay a tested starting point.

The portable ``tl`` kernels of the package (``cs336_systems.attention.flash_backward``) stay the
reference. These need a Hopper GPU (sm_90) and a Triton with Gluon (``available``);
``tests/test_flash_gluon.py`` beside this file compares them with float64 attention on ragged
shapes, and ``python lab/attention/probe.py --gluon`` times them beside the ``tl`` kernels and cuDNN.

dK/dV: one program per (key tile, batch entry), longest causal key tiles first, like the ``tl``
kernel. The key tile (BLOCK_N = 16 rows per warp, one or two warpgroups) stays in shared memory;
query tiles of BLOCK_M rows stream through STAGES buffers filled by TMA, each with its mbarrier.
Per query tile, transposed (keys × queries): Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ are issued together, Pᵀ is
computed while dPᵀ is still on the tensor cores, and dV += Pᵀ·dO and dK += dSᵀ·Q take Pᵀ and dSᵀ
from registers. A ring buffer is refilled once the previous tile's products are done with it.
dQ: the same with the roles swapped (one program per query tile, key tiles streamed).

Masked tiles (the causal diagonal, a ragged end) run their products synchronously, and the dK/dV
accumulators are waited for between the loops: otherwise ptxas serialises every wgmma of the
kernel (its warnings C7514/C7515, seen by compiling for sm_90 on a CPU machine).

Q, dO, K, V are read as 2-D (batch · N, d) views through TMA descriptors, so a ragged last tile
reads the next batch entry's rows: those rows are masked to P = 0 (which also zeroes their dS),
and rows past the end are computed but not stored.
"""
from __future__ import annotations

import functools
import math
import os

import torch

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, tma, warpgroup_mma, warpgroup_mma_init,
                                                                   warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    HAVE_GLUON = True
except ImportError:          # a Triton without Gluon (or without its Hopper module)
    HAVE_GLUON = False


def available(device: torch.device) -> bool:
    """Gluon's Hopper kernels can run here: a compiled (not interpreted) sm_90 GPU."""
    return (HAVE_GLUON and device.type == "cuda" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
            and torch.cuda.get_device_capability(device) == (9, 0))


if HAVE_GLUON:
    LOG2_E = gl.constexpr(1.4426950408889634)

    @gluon.jit
    def _load_query_tile(j, q_desc, do_desc, q_smem, do_smem, bars, row0, q_lo, n_iters,
                         BLOCK_M: gl.constexpr, STAGES: gl.constexpr):
        """Start the TMA loads of query tile ``j`` (Q and dO) into its ring buffer, if it exists."""
        slot = j % STAGES
        pred = j < n_iters
        mbarrier.expect(bars.index(slot), q_desc.block_type.nbytes + do_desc.block_type.nbytes, pred=pred)
        row = row0 + q_lo + j * BLOCK_M
        tma.async_copy_global_to_shared(q_desc, [row, 0], bars.index(slot), q_smem.index(slot), pred=pred)
        tma.async_copy_global_to_shared(do_desc, [row, 0], bars.index(slot), do_smem.index(slot), pred=pred)

    @gluon.jit
    def _dkdv_step(j, dk, dv, k_smem, v_smem, q_smem, do_smem, bars, q_desc, do_desc, l_base, d_base, offs_k,
                   row0, q_lo, n_iters, n_queries, qk_scale,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, MASK: gl.constexpr,
                   CAUSAL: gl.constexpr, s_layout: gl.constexpr, p_layout: gl.constexpr):
        """Fold query tile ``j`` into the key tile's (dK, dV)."""
        # The previous tile's dK/dV products read the buffer that tile j + STAGES - 1 goes into.
        dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
        _load_query_tile(j + STAGES - 1, q_desc, do_desc, q_smem, do_smem, bars, row0, q_lo, n_iters, BLOCK_M, STAGES)
        slot = j % STAGES
        mbarrier.wait(bars.index(slot), (j // STAGES) & 1)
        q_s = q_smem.index(slot)
        do_s = do_smem.index(slot)

        offs_q = q_lo + j * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
        q_ok = offs_q < n_queries
        lse = gl.load(l_base + offs_q, mask=q_ok, other=0.0)
        delta = gl.load(d_base + offs_q, mask=q_ok, other=0.0)

        zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=s_layout)
        if MASK:
            # Masked tiles (the diagonal, a ragged end) run their products synchronously: reading
            # the masked Sᵀ while dPᵀ was in flight made ptxas serialise every wgmma of the kernel.
            s_t = warpgroup_mma(k_smem, q_s.permute((1, 0)), zero, use_acc=False)
            dp_t = warpgroup_mma(v_smem, do_s.permute((1, 0)), zero, use_acc=False)
            keep = gl.expand_dims(q_ok, 0)
            if CAUSAL:
                keep = keep & (gl.expand_dims(offs_q, 0) >= gl.expand_dims(offs_k, 1))
            p_t = gl.where(keep, gl.exp2(s_t * qk_scale - gl.expand_dims(lse * LOG2_E, 0)), 0.0)
            ds_t = p_t * (dp_t - gl.expand_dims(delta, 0))
            dv = warpgroup_mma_init(warpgroup_mma(gl.convert_layout(p_t.to(q_desc.dtype), p_layout), do_s, dv))
            dk = warpgroup_mma_init(warpgroup_mma(gl.convert_layout(ds_t.to(q_desc.dtype), p_layout), q_s, dk))
        else:
            s_t = warpgroup_mma(k_smem, q_s.permute((1, 0)), zero, use_acc=False, is_async=True)
            dp_t = warpgroup_mma(v_smem, do_s.permute((1, 0)), zero, use_acc=False, is_async=True)
            s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_t, ))
            p_t = gl.exp2(s_t * qk_scale - gl.expand_dims(lse * LOG2_E, 0))
            dv = warpgroup_mma(gl.convert_layout(p_t.to(q_desc.dtype), p_layout), do_s, dv, is_async=True)
            dp_t = warpgroup_mma_wait(num_outstanding=1, deps=(dp_t, ))
            ds_t = p_t * (dp_t - gl.expand_dims(delta, 0))
            dk = warpgroup_mma(gl.convert_layout(ds_t.to(q_desc.dtype), p_layout), q_s, dk, is_async=True)
        return dk, dv

    @gluon.jit
    def _settle(dk, dv):
        """Wait for the accumulators between loops (ptxas serialises every wgmma of a kernel whose
        in-flight accumulators are copied at a loop boundary)."""
        dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
        return warpgroup_mma_init(dk), warpgroup_mma_init(dv)

    @gluon.jit
    def _dkdv_kernel(q_desc, do_desc, k_desc, v_desc, L, DELTA, DK, DV, stride_lb, n_batch, n_queries, n_keys,
                     scale, qk_scale, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                     num_warps: gl.constexpr):
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        D: gl.constexpr = k_desc.block_type.shape[1]
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                           instr_shape=[16, BLOCK_M, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                             instr_shape=[16, D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)

        pid = gl.program_id(0)
        k_tile = pid // n_batch           # tile 0, the longest causal one, first
        b = pid % n_batch
        k_lo = k_tile * BLOCK_N
        row0 = b * n_queries
        q_lo = k_lo if CAUSAL else 0
        n_iters = gl.cdiv(n_queries - q_lo, BLOCK_M)
        n_whole = (n_queries - q_lo) // BLOCK_M
        n_diag = gl.minimum(BLOCK_N // BLOCK_M, n_iters) if CAUSAL else 0
        n_whole = gl.maximum(n_whole, n_diag)

        k_smem = gl.allocate_shared_memory(k_desc.dtype, k_desc.block_type.shape, k_desc.layout)
        v_smem = gl.allocate_shared_memory(v_desc.dtype, v_desc.block_type.shape, v_desc.layout)
        q_smem = gl.allocate_shared_memory(q_desc.dtype, [STAGES] + q_desc.block_type.shape, q_desc.layout)
        do_smem = gl.allocate_shared_memory(do_desc.dtype, [STAGES] + do_desc.block_type.shape, do_desc.layout)
        kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)

        mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b * n_keys + k_lo, 0], kv_bar, k_smem)
        tma.async_copy_global_to_shared(v_desc, [b * n_keys + k_lo, 0], kv_bar, v_smem)
        for i in gl.static_range(STAGES - 1):
            _load_query_tile(i, q_desc, do_desc, q_smem, do_smem, bars, row0, q_lo, n_iters, BLOCK_M, STAGES)
        mbarrier.wait(kv_bar, 0)

        offs_k = k_lo + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
        l_base = L + b * stride_lb
        d_base = DELTA + b * stride_lb
        # Carried through the loops as asynchronous accumulators (each step waits for the last).
        dk = warpgroup_mma_init(gl.zeros([BLOCK_N, D], gl.float32, layout=acc_layout))
        dv = warpgroup_mma_init(gl.zeros([BLOCK_N, D], gl.float32, layout=acc_layout))
        # The causal diagonal (masked), whole tiles (no mask), a ragged last tile (masked).
        for j in range(0, n_diag):
            dk, dv = _dkdv_step(j, dk, dv, k_smem, v_smem, q_smem, do_smem, bars, q_desc, do_desc, l_base, d_base,
                                offs_k, row0, q_lo, n_iters, n_queries, qk_scale, BLOCK_M, BLOCK_N, STAGES, True,
                                CAUSAL, s_layout, p_layout)
        dk, dv = _settle(dk, dv)
        for j in range(n_diag, n_whole):
            dk, dv = _dkdv_step(j, dk, dv, k_smem, v_smem, q_smem, do_smem, bars, q_desc, do_desc, l_base, d_base,
                                offs_k, row0, q_lo, n_iters, n_queries, qk_scale, BLOCK_M, BLOCK_N, STAGES, False,
                                CAUSAL, s_layout, p_layout)
        dk, dv = _settle(dk, dv)
        for j in range(n_whole, n_iters):
            dk, dv = _dkdv_step(j, dk, dv, k_smem, v_smem, q_smem, do_smem, bars, q_desc, do_desc, l_base, d_base,
                                offs_k, row0, q_lo, n_iters, n_queries, qk_scale, BLOCK_M, BLOCK_N, STAGES, True,
                                CAUSAL, s_layout, p_layout)
        dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
        mbarrier.invalidate(kv_bar)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))

        rows = k_lo + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, acc_layout))
        cols = gl.arange(0, D, layout=gl.SliceLayout(0, acc_layout))
        offs = (b * n_keys + gl.expand_dims(rows, 1)) * D + gl.expand_dims(cols, 0)
        keep = gl.expand_dims(rows < n_keys, 1)
        gl.store(DK + offs, (dk * scale).to(DK.dtype.element_ty), mask=keep)
        gl.store(DV + offs, dv.to(DV.dtype.element_ty), mask=keep)


    @gluon.jit
    def _load_key_tile(j, k_desc, v_desc, k_smem, v_smem, bars, row0, n_iters, BLOCK_N: gl.constexpr,
                       STAGES: gl.constexpr):
        """Start the TMA loads of key tile ``j`` (K and V) into its ring buffer, if it exists."""
        slot = j % STAGES
        pred = j < n_iters
        mbarrier.expect(bars.index(slot), k_desc.block_type.nbytes + v_desc.block_type.nbytes, pred=pred)
        row = row0 + j * BLOCK_N
        tma.async_copy_global_to_shared(k_desc, [row, 0], bars.index(slot), k_smem.index(slot), pred=pred)
        tma.async_copy_global_to_shared(v_desc, [row, 0], bars.index(slot), v_smem.index(slot), pred=pred)

    @gluon.jit
    def _dq_step(j, dq, q_smem, do_smem, k_smem, v_smem, bars, k_desc, v_desc, lse, delta, offs_q, row0, n_iters,
                 n_keys, qk_scale, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                 MASK: gl.constexpr, CAUSAL: gl.constexpr, s_layout: gl.constexpr, p_layout: gl.constexpr):
        """Fold key tile ``j`` into the query tile's dQ."""
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))
        _load_key_tile(j + STAGES - 1, k_desc, v_desc, k_smem, v_smem, bars, row0, n_iters, BLOCK_N, STAGES)
        slot = j % STAGES
        mbarrier.wait(bars.index(slot), (j // STAGES) & 1)
        k_s = k_smem.index(slot)
        v_s = v_smem.index(slot)
        zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
        s = warpgroup_mma(q_smem, k_s.permute((1, 0)), zero, use_acc=False, is_async=True)
        dp = warpgroup_mma(do_smem, v_s.permute((1, 0)), zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
        p = gl.exp2(s * qk_scale - gl.expand_dims(lse * LOG2_E, 1))
        if MASK:
            offs_k = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            keep = gl.expand_dims(offs_k < n_keys, 0)
            if CAUSAL:
                keep = keep & (gl.expand_dims(offs_q, 1) >= gl.expand_dims(offs_k, 0))
            p = gl.where(keep, p, 0.0)
        dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp, ))
        ds = p * (dp - gl.expand_dims(delta, 1))
        dq = warpgroup_mma(gl.convert_layout(ds.to(k_desc.dtype), p_layout), k_s, dq, is_async=True)
        return dq

    @gluon.jit
    def _dq_kernel(q_desc, do_desc, k_desc, v_desc, L, DELTA, DQ, stride_lb, n_batch, n_queries, n_keys, scale,
                   qk_scale, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                   num_warps: gl.constexpr):
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
        D: gl.constexpr = q_desc.block_type.shape[1]
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                             instr_shape=[16, D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)

        pid = gl.program_id(0)
        n_tiles = gl.cdiv(n_queries, BLOCK_M)
        q_tile = pid // n_batch
        if CAUSAL:
            q_tile = n_tiles - 1 - q_tile          # the longest causal tiles first
        b = pid % n_batch
        q_lo = q_tile * BLOCK_M
        k_hi = gl.minimum(q_lo + BLOCK_M, n_keys) if CAUSAL else n_keys
        n_iters = gl.cdiv(k_hi, BLOCK_N)
        # Key tiles wholly before the diagonal (causal) or wholly inside the keys: no mask.
        n_open = gl.minimum(q_lo, n_keys) // BLOCK_N if CAUSAL else n_keys // BLOCK_N
        row0 = b * n_keys

        q_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
        do_smem = gl.allocate_shared_memory(do_desc.dtype, do_desc.block_type.shape, do_desc.layout)
        k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
        v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)
        mbarrier.expect(q_bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [b * n_queries + q_lo, 0], q_bar, q_smem)
        tma.async_copy_global_to_shared(do_desc, [b * n_queries + q_lo, 0], q_bar, do_smem)
        for i in gl.static_range(STAGES - 1):
            _load_key_tile(i, k_desc, v_desc, k_smem, v_smem, bars, row0, n_iters, BLOCK_N, STAGES)

        offs_q = q_lo + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
        q_ok = offs_q < n_queries
        lse = gl.load(L + b * stride_lb + offs_q, mask=q_ok, other=0.0)
        delta = gl.load(DELTA + b * stride_lb + offs_q, mask=q_ok, other=0.0)
        mbarrier.wait(q_bar, 0)
        dq = warpgroup_mma_init(gl.zeros([BLOCK_M, D], gl.float32, layout=acc_layout))
        for j in range(0, n_open):
            dq = _dq_step(j, dq, q_smem, do_smem, k_smem, v_smem, bars, k_desc, v_desc, lse, delta, offs_q, row0,
                          n_iters, n_keys, qk_scale, BLOCK_M, BLOCK_N, STAGES, False, CAUSAL, s_layout, p_layout)
        for j in range(n_open, n_iters):
            dq = _dq_step(j, dq, q_smem, do_smem, k_smem, v_smem, bars, k_desc, v_desc, lse, delta, offs_q, row0,
                          n_iters, n_keys, qk_scale, BLOCK_M, BLOCK_N, STAGES, True, CAUSAL, s_layout, p_layout)
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))
        mbarrier.invalidate(q_bar)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))

        rows = q_lo + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
        cols = gl.arange(0, D, layout=gl.SliceLayout(0, acc_layout))
        offs = (b * n_queries + gl.expand_dims(rows, 1)) * D + gl.expand_dims(cols, 0)
        gl.store(DQ + offs, (dq * scale).to(DQ.dtype.element_ty), mask=gl.expand_dims(rows < n_queries, 1))

    # --- dK/dV, warp-specialised -----------------------------------------------------------------
    # One program per CONSUMERS × 64 keys: CONSUMERS warpgroups, each owning 64 of them (its rows
    # of the dK, dV accumulators), and one loader warp. The loader fills a ring of query tiles (Q
    # and dO) by TMA; with two consumers both read every tile from the same buffers, so each Q/dO
    # tile crosses L2 once per 128 keys instead of once per 64 (at the leaderboard shape 4.3 GB
    # instead of 8.6). The consumers are all in the default partition (num_warps = 4 × CONSUMERS,
    # one product of M = 64 · CONSUMERS rows, each warpgroup issuing its 64), not one worker
    # partition each: ptxas (CUDA 12.8, Triton 3.6) serialises the wgmma of any consumer in a
    # worker partition (C7512) unless the kernel's own register cap (.maxnreg, not the worker's
    # setmaxnreg) covers the consumer, which with two consumers needs more registers per thread
    # than the register file holds (ptxas_warnings.py; NOTES.md, "ptxas serialisation, again").
    # The default partition gets setmaxnreg's count, and is clean at maxnreg 160 with two.

    @gluon.jit
    def _ws_loader(a_desc, b_desc, c_desc, e_desc, a_smem, b_smem, c_smem, e_smem, ready, empty, fixed_bar,
                   row0, fixed_row0, lo, n_iters, n_diag):
        """The loader warp: the program's fixed tiles (C and E: K and V in dK/dV, Q and dO in dQ),
        one each, then the streamed pairs (A, B: Q and dO in dK/dV, K and V in dQ) into the
        ring, tile (i + n_diag) % n_iters at ring position i, each buffer once its consumers are
        done with what it held."""
        BLOCK: gl.constexpr = a_desc.block_type.shape[0]
        STAGES: gl.constexpr = a_smem.type.shape[0]
        CONSUMERS: gl.constexpr = c_smem.type.shape[0]
        mbarrier.expect(fixed_bar, CONSUMERS * (c_desc.block_type.nbytes + e_desc.block_type.nbytes))
        for w in gl.static_range(CONSUMERS):
            tma.async_copy_global_to_shared(c_desc, [fixed_row0 + w * c_desc.block_type.shape[0], 0], fixed_bar,
                                            c_smem.index(w))
            tma.async_copy_global_to_shared(e_desc, [fixed_row0 + w * e_desc.block_type.shape[0], 0], fixed_bar,
                                            e_smem.index(w))
        for i in range(n_iters):
            j = (i + n_diag) % n_iters
            slot = i % STAGES
            # Barriers start as if a phase had just completed: the first STAGES waits pass at once.
            mbarrier.wait(empty.index(slot), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(slot), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            row = row0 + lo + j * BLOCK
            tma.async_copy_global_to_shared(a_desc, [row, 0], ready.index(slot), a_smem.index(slot))
            tma.async_copy_global_to_shared(b_desc, [row, 0], ready.index(slot), b_smem.index(slot))

    @gluon.jit
    def _ws_masked_step(i, j, dk, dv, k_op, v_op, q_smem, do_smem, ready, empty, l_base, d_base, offs_k, q_lo,
                        n_queries, qk_scale, causal, BLOCK_N: gl.constexpr, s_layout: gl.constexpr,
                        p_layout: gl.constexpr):
        """Query tile ``j`` (ring position ``i``), which needs the mask (the causal diagonal, a ragged
        end): products run synchronously, and its buffer is released at the end."""
        STAGES: gl.constexpr = q_smem.type.shape[0]
        BLOCK_M: gl.constexpr = q_smem.type.shape[1]
        slot = i % STAGES
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        q_s = q_smem.index(slot)
        do_s = do_smem.index(slot)
        offs_q = q_lo + j * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
        q_ok = offs_q < n_queries
        lse = gl.load(l_base + offs_q, mask=q_ok, other=0.0)
        delta = gl.load(d_base + offs_q, mask=q_ok, other=0.0)
        zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=s_layout)
        s_t = warpgroup_mma(k_op, q_s.permute((1, 0)), zero, use_acc=False)
        dp_t = warpgroup_mma(v_op, do_s.permute((1, 0)), zero, use_acc=False)
        # ``causal`` is a run-time flag here: constexprs do not survive gl.warp_specialize's arguments.
        keep = gl.expand_dims(q_ok, 0) & ((gl.expand_dims(offs_q, 0) >= gl.expand_dims(offs_k, 1)) | (causal == 0))
        p_t = gl.where(keep, gl.exp2(s_t * qk_scale - gl.expand_dims(lse * LOG2_E, 0)), 0.0)
        ds_t = p_t * (dp_t - gl.expand_dims(delta, 0))
        dv = warpgroup_mma(gl.convert_layout(p_t.to(q_smem.dtype), p_layout), do_s, dv)
        dk = warpgroup_mma(gl.convert_layout(ds_t.to(q_smem.dtype), p_layout), q_s, dk)
        mbarrier.arrive(empty.index(slot), count=1)
        return dk, dv

    @gluon.jit
    def _ws_step(i, j, dk, dv, k_op, v_op, q_smem, do_smem, ready, empty, l_base, d_base, q_lo, qk_scale,
                 BLOCK_N: gl.constexpr, s_layout: gl.constexpr, p_layout: gl.constexpr):
        """Whole query tile ``j`` (ring position ``i``), products asynchronous: the previous tile's
        dK/dV products are still running when this tile's scores are issued, and its buffer is
        released once they are done."""
        STAGES: gl.constexpr = q_smem.type.shape[0]
        BLOCK_M: gl.constexpr = q_smem.type.shape[1]
        slot = i % STAGES
        offs_q = q_lo + j * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
        lse = gl.load(l_base + offs_q)
        delta = gl.load(d_base + offs_q)
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        q_s = q_smem.index(slot)
        do_s = do_smem.index(slot)
        zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=s_layout)
        s_t = warpgroup_mma(k_op, q_s.permute((1, 0)), zero, use_acc=False, is_async=True)
        dp_t = warpgroup_mma(v_op, do_s.permute((1, 0)), zero, use_acc=False, is_async=True)
        # Groups complete in order: with Sᵀ done, so are the previous tile's dV and dK products.
        s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_t, ))
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), count=1, pred=i > 0)
        p_t = gl.exp2(s_t * qk_scale - gl.expand_dims(lse * LOG2_E, 0))
        dv = warpgroup_mma(gl.convert_layout(p_t.to(q_smem.dtype), p_layout), do_s, dv, is_async=True)
        dp_t = warpgroup_mma_wait(num_outstanding=1, deps=(dp_t, ))
        ds_t = p_t * (dp_t - gl.expand_dims(delta, 0))
        dk = warpgroup_mma(gl.convert_layout(ds_t.to(q_smem.dtype), p_layout), q_s, dk, is_async=True)
        return dk, dv

    @gluon.jit
    def _ws_consumer(q_smem, do_smem, k_smem, v_smem, ready, empty, kv_bar, L, DELTA, DK, DV, b, stride_lb, k_lo,
                     q_lo, n_iters, n_diag, n_queries, n_keys, scale, qk_scale, causal):
        """The default partition's BLOCK_N = 16 · num_warps keys (64 per warpgroup): dK, dV over
        the query tiles, written at the end."""
        BLOCK_M: gl.constexpr = q_smem.type.shape[1]
        BLOCK_N: gl.constexpr = k_smem.type.shape[1]
        D: gl.constexpr = k_smem.type.shape[2]
        # Each warpgroup holds 64 rows of Sᵀ, dPᵀ, dK, dV, as a one-warpgroup consumer does.
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                           instr_shape=[16, BLOCK_M, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                             instr_shape=[16, D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        STAGES: gl.constexpr = q_smem.type.shape[0]
        key0 = k_lo
        # The loader sends the tiles in ring order i = 0, 1, ...: tile (i + n_diag) % n_iters, so the
        # n_diag causal-diagonal tiles of the program's keys come last. Whole tiles [n_diag, t2) run
        # first with asynchronous products, then a ragged end [t2, n_iters) and the diagonal, masked
        # and synchronous. (Synchronous products issued before the asynchronous loop made ptxas
        # serialise every wgmma of the kernel, warning C7511.) With two warpgroups the second's
        # rows of the first diagonal tile are all above the diagonal: computed and masked to
        # P = dS = 0 (one 64 × 64 tile per 128 keys), since both warpgroups issue one product.
        t2 = gl.maximum((n_queries - q_lo) // BLOCK_M, n_diag)
        mbarrier.wait(kv_bar, 0)
        k_op = k_smem.index(0)
        v_op = v_smem.index(0)
        offs_k = key0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
        l_base = L + b * stride_lb
        d_base = DELTA + b * stride_lb
        dk = warpgroup_mma_init(gl.zeros([BLOCK_N, D], gl.float32, layout=acc_layout))
        dv = warpgroup_mma_init(gl.zeros([BLOCK_N, D], gl.float32, layout=acc_layout))
        for i in range(0, t2 - n_diag):
            dk, dv = _ws_step(i, i + n_diag, dk, dv, k_op, v_op, q_smem, do_smem, ready, empty, l_base, d_base,
                              q_lo, qk_scale, BLOCK_N, s_layout, p_layout)
        dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
        if t2 > n_diag:
            mbarrier.arrive(empty.index((t2 - n_diag - 1) % STAGES), count=1)
        for i in range(t2 - n_diag, n_iters):
            j = (i + n_diag) % n_iters
            dk, dv = _ws_masked_step(i, j, dk, dv, k_op, v_op, q_smem, do_smem, ready, empty, l_base, d_base,
                                     offs_k, q_lo, n_queries, qk_scale, causal, BLOCK_N, s_layout, p_layout)

        rows = key0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, acc_layout))
        cols = gl.arange(0, D, layout=gl.SliceLayout(0, acc_layout))
        offs = (b * n_keys + gl.expand_dims(rows, 1)) * D + gl.expand_dims(cols, 0)
        keep = gl.expand_dims(rows < n_keys, 1)
        gl.store(DK + offs, (dk * scale).to(DK.dtype.element_ty), mask=keep)
        gl.store(DV + offs, dv.to(DV.dtype.element_ty), mask=keep)

    @gluon.jit
    def _dkdv_ws_kernel(q_desc, do_desc, k_desc, v_desc, L, DELTA, DK, DV, stride_lb, n_batch, n_queries, n_keys,
                        scale, qk_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr, CONSUMERS: gl.constexpr,
                        num_warps: gl.constexpr):
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]     # the program's keys, 64 per consumer
        gl.static_assert(BLOCK_N == 64 * CONSUMERS and num_warps == 4 * CONSUMERS)
        pid = gl.program_id(0)
        k_tile = pid // n_batch           # tile 0, the longest causal one, first
        b = pid % n_batch
        k_lo = k_tile * BLOCK_N
        q_lo = k_lo if CAUSAL else 0
        n_iters = gl.cdiv(n_queries - q_lo, BLOCK_M)
        # Query tiles that meet the causal diagonal of the program's BLOCK_N keys.
        n_diag = gl.minimum(BLOCK_N // BLOCK_M, n_iters) if CAUSAL else 0

        q_smem = gl.allocate_shared_memory(q_desc.dtype, [STAGES] + q_desc.block_type.shape, q_desc.layout)
        do_smem = gl.allocate_shared_memory(do_desc.dtype, [STAGES] + do_desc.block_type.shape, do_desc.layout)
        k_smem = gl.allocate_shared_memory(k_desc.dtype, [1] + k_desc.block_type.shape, k_desc.layout)
        v_smem = gl.allocate_shared_memory(v_desc.dtype, [1] + v_desc.block_type.shape, v_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            # One arrival per release: Gluon's mbarrier.arrive syncs the whole partition (bar.sync
            # over its num_warps) and arrives from one thread, so it follows both warpgroups' waits.
            mbarrier.init(empty.index(i), count=1)
        mbarrier.init(kv_bar, count=1)

        consumer_args = (q_smem, do_smem, k_smem, v_smem, ready, empty, kv_bar, L, DELTA, DK, DV, b, stride_lb, k_lo,
                         q_lo, n_iters, n_diag, n_queries, n_keys, scale, qk_scale, gl.to_tensor(1 if CAUSAL else 0))
        loader_args = (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, ready, empty, kv_bar,
                       b * n_queries, b * n_keys + k_lo, q_lo, n_iters, n_diag)
        gl.warp_specialize([(_ws_consumer, consumer_args), (_ws_loader, loader_args)], [1], [24])

    # --- dQ, warp-specialised: the same loader streams key tiles (K, V) past one warpgroup that
    # holds its query tile's Q and dO. The last key tiles (the causal diagonal, a ragged end) are
    # masked inside the one asynchronous loop.

    @gluon.jit
    def _wsq_step(i, dq, q_op, do_op, k_smem, v_smem, ready, empty, lse, delta, offs_q, n_open, n_keys, qk_scale,
                  causal, s_layout: gl.constexpr, p_layout: gl.constexpr, FIRST: gl.constexpr = False):
        """Fold key tile ``i`` into dQ; with FIRST, dQ's product ignores the ``dq`` passed in
        (use_acc=False: scale-d 0 in the wgmma) and starts the sum."""
        STAGES: gl.constexpr = k_smem.type.shape[0]
        BLOCK_N: gl.constexpr = k_smem.type.shape[1]
        BLOCK_M: gl.constexpr = q_op.type.shape[0]
        slot = i % STAGES
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        k_s = k_smem.index(slot)
        v_s = v_smem.index(slot)
        zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
        s = warpgroup_mma(q_op, k_s.permute((1, 0)), zero, use_acc=False, is_async=True)
        dp = warpgroup_mma(do_op, v_s.permute((1, 0)), zero, use_acc=False, is_async=True)
        # With S done, so is the previous tile's dQ product, the last reader of its buffer.
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), count=1, pred=i > 0)
        p = gl.exp2(s * qk_scale - gl.expand_dims(lse * LOG2_E, 1))
        dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp, ))
        # The causal diagonal and a ragged end are masked without a branch: a branch here, or
        # synchronous masked steps after the loop, made ptxas serialise the kernel's wgmma (C7515,
        # C7511; before the first step was peeled, see _wsq_consumer, so perhaps for that reason).
        # The mask goes on P, a copy of S that feeds the next product, never on an accumulator.
        # Tiles before n_open keep everything.
        offs_k = i * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        keep = gl.expand_dims((offs_k < n_keys) | (i < n_open), 0) & (
            (gl.expand_dims(offs_q, 1) >= gl.expand_dims(offs_k, 0)) | (causal == 0) | (i < n_open))
        p = gl.where(keep, p, 0.0)
        ds = p * (dp - gl.expand_dims(delta, 1))
        dq = warpgroup_mma(gl.convert_layout(ds.to(k_smem.dtype), p_layout), k_s, dq, use_acc=not FIRST,
                           is_async=True)
        return dq

    @gluon.jit
    def _wsq_consumer(q_smem, do_smem, k_smem, v_smem, ready, empty, fixed_bar, L, DELTA, DQ, b, stride_lb, q_lo,
                      n_iters, n_open, n_queries, n_keys, scale, qk_scale, causal):
        BLOCK_M: gl.constexpr = q_smem.type.shape[1]
        BLOCK_N: gl.constexpr = k_smem.type.shape[1]
        D: gl.constexpr = q_smem.type.shape[2]
        STAGES: gl.constexpr = k_smem.type.shape[0]
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        offs_q = q_lo + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
        q_ok = offs_q < n_queries
        lse = gl.load(L + b * stride_lb + offs_q, mask=q_ok, other=0.0)
        delta = gl.load(DELTA + b * stride_lb + offs_q, mask=q_ok, other=0.0)
        mbarrier.wait(fixed_bar, 0)
        q_op = q_smem.index(0)
        do_op = do_smem.index(0)
        # The first key tile is peeled out of the loop and its dQ product ignores the old value
        # (use_acc=False) instead of dQ being zeroed and carried into the loop. With a zeroed dQ
        # carried in, LLVM sank the zeros into both sides of the loop's zero-trip guard, so on the
        # path that skips the loop 32 `mov`s wrote dQ's accumulator registers, and that path joins
        # the loop's exit, where the last dQ wgmma is still in flight, before the final wait: ptxas
        # C7515 ("non wgmma instructions defining accumulator registers ... between start and end
        # of the pipeline stage"), with every wgmma of the kernel serialised. Peeled, no
        # instruction but a wgmma writes an accumulator (checked in the PTX). Same sum: the first
        # product is dS·K alone, as 0 + dS·K was. Needs n_iters ≥ 1, i.e. n_keys ≥ 1
        # (launch_dq_ws asserts it; before, zero keys gave dQ = 0).
        dq = gl.zeros([BLOCK_M, D], gl.float32, layout=acc_layout)     # a placeholder: not read
        dq = _wsq_step(0, dq, q_op, do_op, k_smem, v_smem, ready, empty, lse, delta, offs_q, n_open, n_keys,
                       qk_scale, causal, s_layout, p_layout, True)
        for i in range(1, n_iters):
            dq = _wsq_step(i, dq, q_op, do_op, k_smem, v_smem, ready, empty, lse, delta, offs_q, n_open, n_keys,
                           qk_scale, causal, s_layout, p_layout)
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))
        rows = q_lo + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
        cols = gl.arange(0, D, layout=gl.SliceLayout(0, acc_layout))
        offs = (b * n_queries + gl.expand_dims(rows, 1)) * D + gl.expand_dims(cols, 0)
        gl.store(DQ + offs, (dq * scale).to(DQ.dtype.element_ty), mask=gl.expand_dims(rows < n_queries, 1))

    @gluon.jit
    def _dq_ws_kernel(q_desc, do_desc, k_desc, v_desc, L, DELTA, DQ, stride_lb, n_batch, n_queries, n_keys, scale,
                      qk_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        pid = gl.program_id(0)
        n_tiles = gl.cdiv(n_queries, BLOCK_M)
        q_tile = pid // n_batch
        if CAUSAL:
            q_tile = n_tiles - 1 - q_tile          # the longest causal tiles first
        b = pid % n_batch
        q_lo = q_tile * BLOCK_M
        k_hi = gl.minimum(q_lo + BLOCK_M, n_keys) if CAUSAL else n_keys
        n_iters = gl.cdiv(k_hi, BLOCK_N)
        # Key tiles wholly before the diagonal (causal) or wholly inside the keys: no mask.
        n_open = gl.minimum(q_lo, n_keys) // BLOCK_N if CAUSAL else n_keys // BLOCK_N

        q_smem = gl.allocate_shared_memory(q_desc.dtype, [1] + q_desc.block_type.shape, q_desc.layout)
        do_smem = gl.allocate_shared_memory(do_desc.dtype, [1] + do_desc.block_type.shape, do_desc.layout)
        k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
        v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        fixed_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)
        mbarrier.init(fixed_bar, count=1)
        consumer_args = (q_smem, do_smem, k_smem, v_smem, ready, empty, fixed_bar, L, DELTA, DQ, b, stride_lb, q_lo,
                         n_iters, n_open, n_queries, n_keys, scale, qk_scale, gl.to_tensor(1 if CAUSAL else 0))
        # The dK/dV loader with the roles swapped: K, V stream; Q, dO are the fixed tiles.
        loader_args = (k_desc, v_desc, q_desc, do_desc, k_smem, v_smem, q_smem, do_smem, ready, empty, fixed_bar,
                       b * n_keys, b * n_queries + q_lo, 0, n_iters, 0)
        gl.warp_specialize([(_wsq_consumer, consumer_args), (_ws_loader, loader_args)], [1], [24])


@functools.lru_cache(maxsize=None)
def _layout(rows: int, d: int, dtype: torch.dtype):
    return gl.NVMMASharedLayout.get_default_for([rows, d], {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}[dtype])


def _descriptor(t: torch.Tensor, rows: int) -> "TensorDescriptor":
    flat = t.view(-1, t.shape[-1])
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [rows, t.shape[-1]],
                            _layout(rows, t.shape[-1], t.dtype))


def launch_dkdv(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal: bool, block_m: int = 64,
                block_n: int = 128, stages: int = 3, num_warps: int = 8) -> None:
    """dK, dV into ``grad_k``, ``grad_v`` (contiguous, q's dtype) from the saved L and D (fp32,
    (batch, Nq), unit last stride). ``block_n`` must be 16 × ``num_warps``."""
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    assert block_n == 16 * num_warps and grad_k.is_contiguous() and grad_v.is_contiguous()
    scale = 1.0 / math.sqrt(d)
    grid = (triton_cdiv(n_k, block_n) * batch, )
    _dkdv_kernel[grid](_descriptor(q, block_m), _descriptor(grad_out, block_m), _descriptor(k, block_n),
                       _descriptor(v, block_n), lse, delta, grad_k, grad_v, stride_lb=lse.stride(0), n_batch=batch,
                       n_queries=n_q, n_keys=n_k, scale=scale, qk_scale=scale * 1.4426950408889634,
                       CAUSAL=is_causal, BLOCK_M=block_m, STAGES=stages, num_warps=num_warps)


def launch_dkdv_ws(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal: bool, stages: int = 3,
                   maxnreg: int = 160, consumers: int = 2) -> None:
    """dK, dV by the warp-specialised kernel: programs of ``consumers`` × 64 keys, one consumer
    warpgroup per 64 (all in the default partition) and a loader warp; query tiles of 64 rows.
    ``maxnreg`` caps the registers per thread at entry (the consumers get more by setmaxnreg): 128
    gives two one-consumer programs per SM; two consumers need 160 (ptxas serialises at 128)."""
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    assert grad_k.is_contiguous() and grad_v.is_contiguous()
    scale = 1.0 / math.sqrt(d)
    grid = (triton_cdiv(n_k, 64 * consumers) * batch, )
    _dkdv_ws_kernel[grid](_descriptor(q, 64), _descriptor(grad_out, 64), _descriptor(k, 64 * consumers),
                          _descriptor(v, 64 * consumers), lse, delta, grad_k, grad_v, stride_lb=lse.stride(0),
                          n_batch=batch, n_queries=n_q, n_keys=n_k, scale=scale, qk_scale=scale * 1.4426950408889634,
                          CAUSAL=is_causal, STAGES=stages, CONSUMERS=consumers, num_warps=4 * consumers,
                          maxnreg=maxnreg)


def launch_dq_ws(q, k, v, grad_out, lse, delta, grad_q, is_causal: bool, stages: int = 4, maxnreg: int = 128) -> None:
    """dQ by the warp-specialised kernel: 64-query programs, one consumer warpgroup and a loader
    warp streaming 64-key tiles."""
    batch, n_q, d = q.shape
    # The consumer issues key tile 0 before its loop: with no keys it would wait for it forever.
    assert grad_q.is_contiguous() and k.shape[1] > 0
    scale = 1.0 / math.sqrt(d)
    grid = (triton_cdiv(n_q, 64) * batch, )
    _dq_ws_kernel[grid](_descriptor(q, 64), _descriptor(grad_out, 64), _descriptor(k, 64), _descriptor(v, 64), lse,
                        delta, grad_q, stride_lb=lse.stride(0), n_batch=batch, n_queries=n_q, n_keys=k.shape[1],
                        scale=scale, qk_scale=scale * 1.4426950408889634, CAUSAL=is_causal, STAGES=stages,
                        num_warps=4, maxnreg=maxnreg)


def launch_dq(q, k, v, grad_out, lse, delta, grad_q, is_causal: bool, block_m: int = 128, block_n: int = 64,
              stages: int = 3, num_warps: int = 8) -> None:
    """dQ into ``grad_q`` (contiguous, q's dtype). ``block_m`` must be 16 × ``num_warps``, and a
    multiple of ``block_n`` (the causal split)."""
    batch, n_q, d = q.shape
    assert block_m == 16 * num_warps and block_m % block_n == 0 and grad_q.is_contiguous()
    scale = 1.0 / math.sqrt(d)
    grid = (triton_cdiv(n_q, block_m) * batch, )
    _dq_kernel[grid](_descriptor(q, block_m), _descriptor(grad_out, block_m), _descriptor(k, block_n),
                     _descriptor(v, block_n), lse, delta, grad_q, stride_lb=lse.stride(0), n_batch=batch,
                     n_queries=n_q, n_keys=k.shape[1], scale=scale, qk_scale=scale * 1.4426950408889634,
                     CAUSAL=is_causal, BLOCK_N=block_n, STAGES=stages, num_warps=num_warps)


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def probe(q, k, v, out, grad, lse, delta, buffers, bench) -> dict:
    """Check these kernels against the ``tl`` kernels' results on the same inputs, then time them
    over a few settings (for probe.py --gluon)."""
    from cs336_systems.attention import flash_triton as ft

    dq, dk, dv = buffers
    tiles = ft.choose_tiles(q.shape[-1], q.dtype)
    ft.launch_dkdv(q, k, v, grad, lse, delta, dk, dv, True, tiles.dkdv)
    ft.launch_dq(q, k, v, grad, lse, delta, dq, True, tiles.dq)
    want = {"dq": dq.float(), "dk": dk.float(), "dv": dv.float()}

    def rel(got, name):
        return float((got.float() - want[name]).norm() / want[name].norm())

    results = {}
    for block_m, stages, warps in ((64, 2, 8), (64, 3, 8), (64, 4, 8), (64, 3, 4), (128, 2, 8)):
        name = f"dkdv_m{block_m}_n{16 * warps}_s{stages}_w{warps}"
        try:
            gk, gv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
            run = lambda: launch_dkdv(q, k, v, grad, lse, delta, gk, gv, True, block_m, 16 * warps, stages, warps)  # noqa: E731,B023
            run()
            err = max(rel(gk, "dk"), rel(gv, "dv"))
            results[name] = {"rel_err_vs_tl": err, "ms": bench(run) if err < 2e-2 else None}
        except Exception as exc:  # noqa: BLE001 - a setting that does not compile or fit is a result
            results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    for stages, maxnreg, consumers in ((3, 160, 2), (2, 128, 1), (3, 128, 1), (4, 128, 1), (6, 128, 1),
                                       (3, 96, 1)):
        name = f"dkdv_ws_s{stages}_r{maxnreg}_c{consumers}"
        try:
            gk, gv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
            run = lambda: launch_dkdv_ws(q, k, v, grad, lse, delta, gk, gv, True, stages, maxnreg, consumers)  # noqa: E731,B023
            run()
            err = max(rel(gk, "dk"), rel(gv, "dv"))
            results[name] = {"rel_err_vs_tl": err, "ms": bench(run) if err < 2e-2 else None}
        except Exception as exc:  # noqa: BLE001
            results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    for stages, maxnreg in ((2, 128), (3, 128), (4, 128), (6, 128)):
        name = f"dq_ws_s{stages}_r{maxnreg}"
        try:
            gq = torch.full_like(q, float("nan"))
            run = lambda: launch_dq_ws(q, k, v, grad, lse, delta, gq, True, stages, maxnreg)  # noqa: E731,B023
            run()
            err = rel(gq, "dq")
            results[name] = {"rel_err_vs_tl": err, "ms": bench(run) if err < 2e-2 else None}
        except Exception as exc:  # noqa: BLE001
            results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    for block_n, stages, warps in ((64, 2, 8), (64, 3, 8), (64, 4, 8), (64, 3, 4), (128, 2, 8)):
        name = f"dq_m{16 * warps}_n{block_n}_s{stages}_w{warps}"
        try:
            gq = torch.full_like(q, float("nan"))
            run = lambda: launch_dq(q, k, v, grad, lse, delta, gq, True, 16 * warps, block_n, stages, warps)  # noqa: E731,B023
            run()
            err = rel(gq, "dq")
            results[name] = {"rel_err_vs_tl": err, "ms": bench(run) if err < 2e-2 else None}
        except Exception as exc:  # noqa: BLE001
            results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return results
