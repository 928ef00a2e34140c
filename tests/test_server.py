import torch

from fedlight.server import ops
from fedlight.server.fedavg import FedAvg


def test_weighted_average_hand_computed() -> None:
    # Prepare: two clients with 1 and 3 samples
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(4)}
    b = {"w": torch.tensor([5.0, 6.0]), "n": torch.tensor(8)}
    # Execute
    avg = ops.weighted_average([a, b], [1, 3])
    # Assert: (1*[1,2] + 3*[5,6]) / 4 = [4, 5]; ints rounded: (4 + 24) / 4 = 7
    assert torch.equal(avg["w"], torch.tensor([4.0, 5.0]))
    assert avg["n"].dtype == torch.int64 and int(avg["n"]) == 7


def test_fedavg_of_equal_states_is_identity() -> None:
    s = {"w": torch.randn(3, 4), "b": torch.randn(4)}
    avg = ops.weighted_average([s, s, s], [2, 7, 1])
    for k in s:
        assert torch.allclose(avg[k], s[k], atol=1e-7)


def test_fedavg_renormalises_over_answering_clients_and_keeps_state_without_answers() -> None:
    agg = FedAvg()
    old = {"w": torch.zeros(2)}
    acc = agg.accumulate(None, {"w": torch.tensor([2.0, 2.0])}, 10.0)
    assert torch.equal(agg.finalize(old, acc)["w"], torch.tensor([2.0, 2.0]))
    assert agg.finalize(old, None) is old
    empty = agg.accumulate(None, old, 0.0)
    assert agg.finalize(old, empty) is old


def test_sum_is_split_invariant() -> None:
    # what two ranks compute separately and add equals one rank's sum
    states = [{"w": torch.randn(5)} for _ in range(4)]
    whole = None
    for s, w in zip(states, [1, 2, 3, 4]):
        whole = ops.weighted_sum(whole, s, w)
    left = ops.weighted_sum(ops.weighted_sum(None, states[0], 1), states[1], 2)
    right = ops.weighted_sum(ops.weighted_sum(None, states[2], 3), states[3], 4)
    assert torch.allclose(whole["w"], left["w"] + right["w"])
    assert float(whole[ops.WEIGHT_KEY]) == 10
