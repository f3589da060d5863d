"""What our FlashAttention kernels ran, in words, for the B3, B4 and B5 sections: tiles, tile order,
fp32 products, splits and the backward (``attention.flash_record.ran``), saying where records do not
give it; the writeup states nothing about our kernels beyond it.
"""
from __future__ import annotations

from dataclasses import dataclass

from cs336_systems.accounting.hardware import BY_DEVICE_NAME
from cs336_systems.attention.flash_record import TREE, ran, shape_of
from cs336_systems.attention.tuned_tiles import TUNED
from cs336_systems.profiling.mfu import AttentionPeak
from cs336_systems.report.contract import Unread

# --- what ran: the facts about our kernels the writeup may state, each with where it comes from ---

@dataclass(frozen=True, kw_only=True)
class Fact:
    """One fact of what ran, in words: its values over the records that say it, and where it comes from."""
    fact: str
    label: str
    values: list[str] | None
    source: str
    known: int | None


@dataclass(frozen=True, kw_only=True)
class TileRow:
    """One tile set: the (dtype, d) or (function, dtype) it ran for, the lengths, each kernel's tiles."""
    key: list[int | str]
    seqs: str
    forward: str
    dkdv: str
    dq: str


@dataclass(frozen=True, kw_only=True)
class Differs:
    fact: Unread[str]
    label: str
    ran: list[str]
    tree: list[str]


@dataclass(frozen=True, kw_only=True)
class TreeDifferences:
    """The facts known of the records' kernels (``compared``) and those in which they are not this tree's."""
    compared: list[str]
    differs: list[Differs] | None


@dataclass(frozen=True, kw_only=True)
class WhatRan:
    """What our kernels ran in a set of records (``what_ran``), as B3, B4 and B5 word it."""
    records: int
    facts: list[Fact]
    tiles: list[TileRow]
    tiles_vary_with_length: bool
    tree: TreeDifferences | None
    several_lengths: bool
    split: bool                     # some of the records ran split launches


FACT_LABELS = {"order": "causal tile order", "tiles": "tiles", "products": "fp32 products", "splits": "split launches",
               "backward": "backward", "path": "launch path"}
PHRASES = {
    "order": {"longest-first": "the longest causal tiles issued first",
              "index": "tiles in index order (the first programs of the forward and dQ passes hold the shortest "
                       "causal query tiles)"},
    "products": {"ieee": "IEEE fp32 FMA (on a GPU, the CUDA cores)", "tf32x3": "three TF32 tensor-core products each (3xTF32)",
                 "tf32": "TF32 tensor cores", "upcast": "fp32 (Triton's CPU interpreter)"},
    "backward": {"dkdv+dq": "a dK/dV kernel, then a dQ kernel (no atomics)",
                 "fused": "one dK/dV kernel adding dQ atomically", "compiled-pytorch": "the compiled PyTorch backward"},
    "delta": {"pytorch": "D = rowsum(dO ∘ O) in PyTorch", "triton": "D = rowsum(dO ∘ O) in a Triton kernel"},
    "tiles_from": {"tuned": "the tuner's (attention/tuned_tiles.py) where it has an entry",
                   "default": "the defaults where the tuner has no entry",
                   "interpreter": "the small tiles of Triton's CPU interpreter"},
    "path": {"plan": "the eager call's cached per-shape plan", "plain": "plain launches",
             "compiled": "plain launches under torch.compile",
             "compiled-plan": "the cached per-shape plan, called from the compiled graph through the custom op", "pytorch": "PyTorch tiles (no Triton)"},
}

# The facts of ``tree_differences`` in a few words.
SHORT = {"order": {"label": "causal tile order", "longest-first": "longest first", "index": "index order"},
         "tiles_from": {"label": "tile choice", "fixed": "fixed per dtype and head dimension", "tuned": "the tuner's",
                        "default": "defaults", "interpreter": "the interpreter's"},
         "products": {"label": "fp32 products", "ieee": "IEEE FMA", "tf32x3": "3xTF32"},
         "delta": {"label": "where D = rowsum(dO ∘ O) is computed", "pytorch": "in PyTorch", "triton": "in a Triton kernel"},
         "backward": {"label": "backward kernels", "dkdv+dq": "dK/dV then dQ", "fused": "fused, dQ added atomically"}}


# The peaks of ``profiling.mfu.attention_peak`` (by their ``unit``) in the writeup's sentences, and as
# a table cell or a figure's legend names them.
PEAK_WORDS = {"bf16": "the dense bf16 tensor-core peak", "tf32": "the TF32 tensor-core peak",
              "tf32x3": "a third of the TF32 tensor-core peak (3xTF32)", "fp32": "the fp32 CUDA-core peak"}
PEAK_CELLS = {"bf16": "bf16 tensor cores", "tf32": "TF32 tensor cores", "tf32x3": "TF32 tensor cores ÷ 3",
              "fp32": "fp32 CUDA cores"}


def peak_words(peak: AttentionPeak | None) -> str | None:
    return None if peak is None else PEAK_WORDS[peak.unit] + (", the lowest its products could run at" if peak.lowest else "")


def peak_cell(peak: AttentionPeak | None) -> str | None:
    return None if peak is None else PEAK_CELLS[peak.unit] + (" (the lowest)" if peak.lowest else "")


def _phrase(fact: str, record: dict, facts: dict) -> str | None:
    """One record's value of ``fact`` in words; "" where the fact does not apply to the record
    (fp32 products of a bf16 record, splits of the compiled PyTorch backward); None where unknown."""
    if fact == "products" and record["params"].get("dtype") != "fp32":
        return ""
    if fact == "order" and not shape_of(record)["causal"]:
        return ""                           # every tile is as long without the mask
    if fact == "backward":
        kernels = facts.get("backward")
        if kernels is None:
            return None
        delta = PHRASES["delta"].get(facts.get("delta"))
        after = f", after {delta}" if delta and kernels != "compiled-pytorch" else ""
        return PHRASES["backward"].get(kernels, kernels) + after
    if fact == "splits":
        if "splits" not in facts:
            return None
        return "split" if facts["splits"] > 1 or max(facts.get("backward_splits") or [1]) > 1 else "none"
    if fact == "tiles":
        if not facts.get("tiles"):
            return None
        return PHRASES["tiles_from"].get(facts.get("tiles_from"), "as listed")
    value = facts.get(fact)
    return None if value is None else PHRASES[fact].get(value, value)


def _source(missing: int, total: int) -> str:
    """Where a fact came from, in words: the records, where they say it."""
    if not missing:
        return "the records"
    if missing == total:
        return "not known: the records do not say"
    return f"the records; not known for {missing} of {total} records"


def _tile(t: dict | None) -> str:
    if not t:
        return "—"
    extra = f" ({t['num_warps']}w, {t['num_stages']}s)" if "num_warps" in t else ""
    return f"{t['block_q']}×{t['block_k']}{extra}"


def shape_seq(record: dict) -> int:
    p = record["params"]
    return int(p["shape"][1] if "shape" in p else p["seq"])


def by_dtype_and_d(record: dict) -> tuple:
    return record["params"].get("dtype"), record["params"].get("d")


def tile_rows(resolved: list[tuple[dict, dict]], key=by_dtype_and_d) -> list[TileRow]:
    """One row per (``key``, tile set): the lengths it ran at and each kernel's tiles."""
    rows: dict = {}
    for record, what in resolved:
        if tiles := what["facts"].get("tiles"):
            cells = tuple(_tile(tiles.get(k)) for k in ("forward", "dkdv", "dq"))
            rows.setdefault((*key(record), cells), set()).add(shape_seq(record))
    ordered = sorted(rows.items(), key=lambda item: (item[0][:-1], min(item[1])))    # by key, then length
    return [TileRow(key=list(k), seqs=f"{min(seqs)}" if len(seqs) == 1 else f"{min(seqs)}–{max(seqs)}",
                    forward=forward, dkdv=dkdv, dq=dq) for (*k, (forward, dkdv, dq)), seqs in ordered]


def tree_differences(resolved: list[tuple[dict, dict]]) -> TreeDifferences | None:
    """How the kernels of these records compare with this tree's in the facts of
    ``flash_record.TREE``: ``compared``, the facts known for them, and ``differs``, those in which
    they differ, each with what ran and what the tree runs, in words. fp32 products count only on a
    card with TF32 tensor cores (where the tree runs 3xTF32), the order only under the causal mask.
    None where the records and their commits say none of these facts."""
    seen: dict[str, set] = {}
    for record, what in resolved:
        card = BY_DEVICE_NAME.get((record.get("provenance") or {}).get("gpu") or "")
        moot = set() if shape_of(record)["causal"] else {"order"}
        if record["params"].get("dtype") != "fp32" or card is None or card.tf32_flops is None:
            moot.add("products")
        for name in TREE:
            # the compiled PyTorch backward is a choice of the Function, not a kernel of the tree's
            value = what["facts"].get(name)
            if value is not None and value != "compiled-pytorch" and name not in moot:
                seen.setdefault(name, set()).add(value)
    if not seen:
        return None
    compared, out = [name for name in TREE if name in seen], []
    for name in compared:
        tree = TREE[name] if isinstance(TREE[name], tuple) else (TREE[name],)
        if other := seen[name] - set(tree):
            words = SHORT[name]
            out.append(Differs(fact=name, label=words["label"], ran=sorted(words.get(v, v) for v in other),
                               tree=[words.get(v, v) for v in tree]))
    return TreeDifferences(compared=[SHORT[name]["label"] for name in compared], differs=out)


def tuned_entry(dtype: str | None, d: int) -> str | None:
    """The entry of ``attention/tuned_tiles.py`` whose tiles a (dtype name, head dimension) takes, by
    ``flash_tiles.tuned_key``'s rule (its own entry, else its padded width's; a test holds the two
    equal), without importing the kernels."""
    for width in (d, max(16, 1 << (d - 1).bit_length())):
        if f"{dtype}_d{width}" in TUNED:
            return f"{dtype}_d{width}"
    return None


def tuned_elsewhere(records: list[dict]) -> list[str]:
    """The cards on which the tuner chose the tiles that ``records``' shapes take (``tuned_entry``),
    where none of ``records`` ran: those tiles run here untuned for this card (the tuner is not
    re-run per card). Entries for shapes the records do not have say nothing about them."""
    here = {r["provenance"].get("gpu") for r in records}
    used = {tuned_entry((shape := shape_of(r))["dtype"], shape["d"]) for r in records} - {None}
    return sorted({TUNED[key]["measured"]["gpu"] for key in used} - here) if any(here) else []


def what_ran(records: list[dict], facts=tuple(FACT_LABELS), key=by_dtype_and_d) -> WhatRan:
    """What our kernels ran in ``records`` (ours only), for the writeup: per fact its value(s) in
    words and whether the records say it (``flash_record.ran``); the tile sets (``tile_rows``);
    whether the tiles changed with the length; how they differ from this tree's."""
    resolved = [(r, ran(r)) for r in records]
    rows = []
    for fact in facts:
        values, missing, applies = set(), 0, 0
        for record, what in resolved:
            phrase = _phrase(fact, record, what["facts"])
            if phrase == "":
                continue
            applies += 1
            if phrase is None:
                missing += 1
                continue
            values.add(phrase)
        if applies:
            rows.append(Fact(fact=fact, label=FACT_LABELS[fact], values=sorted(values),
                             source=_source(missing, applies), known=applies - missing))
    tiles = tile_rows(resolved, key)
    return WhatRan(records=len(records), facts=rows, tiles=tiles,
                   tiles_vary_with_length=len({tuple(t.key) for t in tiles}) < len(tiles),
                   tree=tree_differences(resolved), several_lengths=len({shape_seq(r) for r in records}) > 1,
                   split=any(row.fact == "splits" and "split" in row.values for row in rows))
