"""How much of a Tofino 1's SRAM does an exact-match table of the P4Info take?

A Tofino 1 pipe has 12 match-action stages; each stage has 80 SRAM blocks of
1,024 words of 128 bits (the open-source Tofino back end of p4c:
`bf-p4c/specs/mau_spec.h` StageUse::MAX_SRAMS = 80, `bf-asm/constants.h`
SRAM_DEPTH = 1 << 10 and MEM_WORD_WIDTH = 128, `Target::Tofino`
NUM_MAU_STAGES = 12). An exact-match entry stores its key less the bits the
hash already used to pick its row (10 per way, EXACT_HASH_ADR_BITS), a
version/valid nibble, the bits that choose its action, and its action data
when that fits the match word (MAX_IMMED_ACTION_DATA = 32 bits); as many
entries as fit share a 128-bit word. A table larger than one stage's blocks is
split over consecutive stages.

This is an estimate (our choice of model): bf-p4c's own resource report is the
authority, and it may pack a key differently (the input crossbar takes whole
bytes: `byte_keys` rounds each key field up to bytes, the pessimistic case).

>>> from controlplane.p4info import load_p4info
>>> budget = sram_budget(load_p4info(), "CassiniIngress.logical_forward")
>>> budget.entry_bits, budget.entries_per_word, budget.blocks, budget.stages
(61, 2, 128, 2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .p4info import P4InfoIndex

STAGES = 12
SRAM_BLOCKS_PER_STAGE = 80
SRAM_WORDS = 1024
WORD_BITS = 128
GHOST_BITS = 10  # row address bits of one hash way
VERSION_VALID_BITS = 4
MAX_IMMEDIATE_BITS = 32


@dataclass(frozen=True)
class SramBudget:
    """One exact-match table's share of a Tofino 1 pipe (per pipe: every pipe holds
    the same entries)."""

    table: str
    entries: int
    entry_bits: int  # stored bits of one entry
    entries_per_word: int
    blocks: int  # SRAM blocks of 1,024 x 128 bits
    stages: int  # stages the blocks span, at most 80 a stage
    # Action data wider than MAX_IMMEDIATE_BITS lives in action RAMs (not counted here).
    action_data_in_ram: bool = False

    @property
    def fits(self) -> bool:
        return self.stages <= STAGES


def sram_budget(
    p4info: P4InfoIndex, table: str, entries: int | None = None, byte_keys: bool = False
) -> SramBudget:
    """`table`'s SRAM at `entries` (default: its P4Info `size`), from its key widths
    and actions in the P4Info (see the module docstring for the model)."""
    info = p4info.table(table)
    if any(m.match_type != "EXACT" for m in info.match_fields):
        raise ValueError(f"{info.name} is not an exact-match table")
    widths = [m.bitwidth for m in info.match_fields]
    key_bits = sum(8 * math.ceil(w / 8) for w in widths) if byte_keys else sum(widths)
    actions = [p4info.action_by_id(a) for a in info.action_ids]
    stored_actions = [a for a in info.action_ids if a not in info.default_only_action_ids]
    selector_bits = math.ceil(math.log2(len(stored_actions))) if len(stored_actions) > 1 else 0
    data_bits = max((sum(p.bitwidth for p in a.params) for a in actions), default=0)
    immediate = data_bits if data_bits <= MAX_IMMEDIATE_BITS else 0
    entry_bits = max(key_bits - GHOST_BITS, 0) + VERSION_VALID_BITS + selector_bits + immediate
    if entry_bits > WORD_BITS:
        raise ValueError(f"{info.name}: {entry_bits}-bit entries need wide words (not modelled)")
    per_word = WORD_BITS // entry_bits
    count = info.size if entries is None else entries
    blocks = math.ceil(count / (per_word * SRAM_WORDS))
    stages = math.ceil(blocks / SRAM_BLOCKS_PER_STAGE)
    return SramBudget(info.name, count, entry_bits, per_word, blocks, stages, immediate < data_bits)
