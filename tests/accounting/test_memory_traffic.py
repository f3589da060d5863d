"""accounting.memory_traffic: the memory-bandwidth floors, against the bytes counted by hand."""
import random

import pytest

from cs336_systems.accounting.hardware import H100_SXM, H200_SXM
from cs336_systems.accounting.memory_traffic import ADAMW_BYTES_PER_PARAMETER, adamw_floor_ms, cold_cache_ms


def test_adamw_moves_seven_fp32_words_a_parameter():
    # read the parameter, its gradient and both moments; write the parameter and both moments back
    assert ADAMW_BYTES_PER_PARAMETER == (4 + 3) * 4


@pytest.mark.parametrize("card", [H100_SXM, H200_SXM])
def test_the_floors_are_bytes_over_the_datasheet_bandwidth(card):
    rng = random.Random(3)
    parameters = rng.uniform(1e8, 3e9)
    assert adamw_floor_ms(parameters, card) == pytest.approx(28 * parameters / card.hbm_bandwidth * 1000)
    resident, l2 = rng.uniform(1e6, 1e9), 50 * 2**20
    assert cold_cache_ms(resident, l2, card) == pytest.approx((resident + l2) / card.hbm_bandwidth * 1000)
    # 1.5 B parameters on an H200 (4.8 TB/s): 42 GB in 8.75 ms
    assert adamw_floor_ms(1.5e9, H200_SXM) == pytest.approx(8.75)
