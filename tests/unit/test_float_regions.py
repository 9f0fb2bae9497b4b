"""The speed side of the accuracy budget: float regions and their contiguous alternatives."""
from edgeforge.quant.budget import contiguous_alternatives, float_regions

ORDER = [f"L{i}" for i in range(10)]


def test_regions_count_boundaries():
    assert float_regions([], ORDER) == 0
    assert float_regions(["L3", "L4"], ORDER) == 1
    assert float_regions(["L1", "L3", "L8"], ORDER) == 3


def test_gaps_filled_then_stretched_to_the_input():
    alts = contiguous_alternatives(["L1", "L3"], ORDER)
    assert alts[0] == ["L1", "L2", "L3"]                 # one region instead of two
    assert alts[1] == ["L0", "L1", "L2", "L3"]           # a float stem: no boundary before it
    assert all(float_regions(a, ORDER) == 1 for a in alts)


def test_far_apart_layers_stay_apart_and_base_is_kept():
    assert contiguous_alternatives(["L4"], ORDER) == []  # nothing cheaper to offer
    alts = contiguous_alternatives(["L9", "L7", "Lx"], ORDER, base=["Lx"])
    assert alts == [["Lx", "L7", "L8", "L9"]]            # gap filled; already at the output
