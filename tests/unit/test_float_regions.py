"""The speed side of the accuracy budget: float regions and their contiguous alternatives."""
from edgeforge.quant.budget import alternatives_within, contiguous_alternatives, float_regions

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


def test_alternatives_that_float_too_much_of_the_weights_are_left_out():
    weights = {name: 100 for name in ORDER}
    weights["L2"] = 5000                               # the gap between L1 and L3 is a big layer
    within, beyond = alternatives_within(["L1", "L3"], ORDER, [], weights, share=0.10)
    # filling L2 adds 5000 of 5900 bytes in float: both alternatives hold it
    assert within == [] and beyond == contiguous_alternatives(["L1", "L3"], ORDER)
    weights["L2"] = 100
    within, beyond = alternatives_within(["L1", "L3"], ORDER, [], weights, share=0.10)
    # L2 adds 100 of 1000 (10 %: within); L0 + L2 add 200 (20 %: beyond)
    assert within == [["L1", "L2", "L3"]] and beyond == [["L0", "L1", "L2", "L3"]]
