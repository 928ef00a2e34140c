"""Buffer policies on hand-made scores and features."""

from __future__ import annotations

import torch

from fedlight.engine.parts.sofed.buffer import ReplayBuffer, fifo, importance, kcenter, random_replacement, reservoir


def _batches(n_batches: int, size: int):
    return [torch.arange(i * size, (i + 1) * size) for i in range(n_batches)]


def test_fifo_keeps_the_newest_and_never_exceeds_size() -> None:
    buf = ReplayBuffer(4)
    for batch in _batches(3, 3):
        stats = fifo(buf, batch)
        assert len(buf.ids) <= 4
    assert buf.ids.tolist() == [5, 6, 7, 8] and stats.dropped_new == 0


def test_reservoir_is_uniform_over_the_stream() -> None:
    counts = torch.zeros(40)
    for seed in range(300):
        buf = ReplayBuffer(8)
        g = torch.Generator().manual_seed(seed)
        for batch in _batches(5, 8):
            reservoir(buf, batch, g)
            assert len(buf.ids) == 8
        counts[buf.ids] += 1
    # each of the 40 samples is kept with probability 8/40: expect 60 of 300, early ones included
    assert counts[:8].mean() > 45 and counts[-8:].mean() < 75 and abs(counts.mean() - 60) < 1e-6


def test_importance_keeps_the_top_scores() -> None:
    table = torch.tensor([0.1, 0.9, 0.5, 0.2, 0.8, 0.3, 0.7, 0.0])
    buf = ReplayBuffer(3)
    importance(buf, torch.tensor([0, 1, 2, 3]), lambda ids: table[ids])
    assert sorted(buf.ids.tolist()) == [1, 2, 3]
    stats = importance(buf, torch.tensor([4, 5, 6, 7]), lambda ids: table[ids])
    assert sorted(buf.ids.tolist()) == [1, 4, 6]
    assert stats.dropped_new == 2 and stats.new == 4


def test_lazy_scoring_rescores_exactly_the_samples_whose_age_hits_the_interval() -> None:
    calls: list[list[int]] = []
    table = torch.linspace(1, 0, 100)  # early samples score highest and stay

    def score(ids: torch.Tensor) -> torch.Tensor:
        calls.append(ids.tolist())
        return table[ids]

    buf = ReplayBuffer(4)
    batches = _batches(7, 4)
    importance(buf, batches[0], score, lazy_interval=3)  # ids 0..3 enter with age 0
    for step, batch in enumerate(batches[1:], start=1):
        calls.clear()
        stats = importance(buf, batch, score, lazy_interval=3)
        rescored_buffer = calls[0] if len(calls) == 2 else []
        expected = [0, 1, 2, 3] if step % 3 == 0 else []
        assert rescored_buffer == expected and stats.rescored == len(expected)
        assert calls[-1] == batch.tolist()  # new samples are always scored
    assert buf.ids.tolist() == [0, 1, 2, 3] and buf.ages.tolist() == [6, 6, 6, 6]


def test_kcenter_picks_spread_out_points() -> None:
    feats = torch.tensor([[0.0, 0.0], [0.1, 0.0], [10.0, 0.0], [0.0, 10.0], [10.1, 0.0], [0.0, 10.1]])
    buf = ReplayBuffer(3)
    kcenter(buf, torch.arange(6), lambda ids: feats[ids])
    chosen = feats[buf.ids]
    # one point from each of the three clusters
    assert {tuple(torch.round(c / 5).tolist()) for c in chosen} == {(0.0, 0.0), (2.0, 0.0), (0.0, 2.0)}


def test_state_round_trip() -> None:
    buf = ReplayBuffer(2)
    fifo(buf, torch.tensor([3, 4, 5]))
    again = ReplayBuffer.from_state(2, buf.state_dict())
    assert again.ids.tolist() == [4, 5] and again.seen == 3


def _random_run(seed: int, size: int = 8, n_batches: int = 6) -> tuple[list[list[int]], int, int]:
    """Random Replacement over a stream of ``n_batches`` batches of ``size``: the buffer after each
    batch, and the new samples that arrived and that were dropped at once."""
    buf, g, held, new, dropped = ReplayBuffer(size), torch.Generator().manual_seed(seed), [], 0, 0
    for batch in _batches(n_batches, size):
        before = set(buf.ids.tolist())
        stats = random_replacement(buf, batch, g)
        assert len(buf.ids) == min(size, len(before) + len(batch))  # full as soon as it can be, never more
        assert set(buf.ids.tolist()) <= before | set(batch.tolist())  # drawn from B u X only
        assert len(set(buf.ids.tolist())) == len(buf.ids)
        arrived = set(batch.tolist())
        assert all((age == 0) == (i in arrived) for i, age in zip(buf.ids.tolist(), buf.ages.tolist()))
        held.append(buf.ids.tolist())
        new, dropped = new + stats.new, dropped + stats.dropped_new
    return held, new, dropped


def test_random_replacement_keeps_a_random_n_of_buffer_and_batch() -> None:
    assert _random_run(0) == _random_run(0)  # determined by the generator's seed
    assert _random_run(0)[0] != _random_run(1)[0]
    small = ReplayBuffer(8)
    random_replacement(small, torch.arange(5), torch.Generator().manual_seed(0))
    assert small.ids.tolist() == [0, 1, 2, 3, 4]  # fits: kept whole
    runs = [_random_run(seed) for seed in range(200)]
    # |X| = N: each sample of B u X stays with probability 1/2, so half of every later batch is
    # dropped at once (the first batch fills the empty buffer); a reservoir would drop 1 - N/seen
    share = sum(d for _, _, d in runs) / sum(n - 8 for _, n, _ in runs)
    assert abs(share - 0.5) < 0.02
    last = torch.tensor([sum(i >= 40 for i in held[-1]) for held, _, _ in runs], dtype=torch.float)
    assert abs(float(last.mean()) - 4.0) < 0.2  # half the final buffer is the last batch
