"""The recorded decode step's check (steadytune/model/decode/graphs.py): a recording that gives other logits than the
eager step turns graphs off with a reason naming the rows and the errors, while a recording that differs only as much
as the eager step differs from itself (kernels that are not bitwise deterministic) stays on. The backend here records
by keeping the step function, as tests/graph_emulation.py does for whole decode steps; what it replays is chosen per
test."""

from __future__ import annotations

import torch

from steadytune.model.decode.graphs import RELATIVE_ROW_ERROR, DecodeGraphs, row_errors


class ReplayBackend:
    """Records a step as itself; `replay_with` decides what a replay writes into the recorded output."""

    def __init__(self, replay_with):
        self.replay_with = replay_with

    def capture(self, step):
        output = step().clone()

        def replay():
            output.copy_(self.replay_with(output))
        return replay, output


def logits(seed: int, rows: int = 4, vocab: int = 64) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed))


def test_a_stale_recording_turns_graphs_off_naming_the_rows():
    state = {"position": 0}

    def step():
        state["position"] += 1
        return logits(state["position"])
    stale = logits(100)
    graphs = DecodeGraphs(torch.device("cpu"), ReplayBackend(lambda out: stale))
    snapshot = lambda: (lambda saved=dict(state): state.update(saved))  # noqa: E731
    graphs.run("key", step, snapshot)
    graphs.run("key", step, snapshot)
    assert not graphs.enabled
    assert "rows [0, 1, 2, 3] of 4 differ" in graphs.disabled_because
    assert "two eager steps from the same state differ by 0.00e+00" in graphs.disabled_because


def test_a_recording_within_the_eager_steps_own_spread_stays_on():
    # Every eager step adds fresh noise of 5 % (as a chaotic random model with non-deterministic sums can): the
    # recorded step differs from it by as much, and graphs stay on.
    state = {"position": 0}
    noise = torch.Generator().manual_seed(7)

    def step():
        base = logits(state["position"])
        state["position"] += 1
        return base + 0.05 * base.norm(dim=1, keepdim=True) / 8 * torch.randn(base.shape, generator=noise)

    graphs = DecodeGraphs(torch.device("cpu"), ReplayBackend(lambda out: logits(0)))
    snapshot = lambda: (lambda saved=dict(state): state.update(saved))  # noqa: E731
    out = graphs.run("key", step, snapshot)
    assert graphs.enabled and graphs.tolerated == 1
    assert float(row_errors(out, logits(0)).max()) > RELATIVE_ROW_ERROR   # the bound alone would have refused it
    assert state["position"] == 1   # the kept eager step advanced the state once


def test_an_exact_recording_is_replayed_without_the_eager_step_after_its_checks():
    state = {"position": 0, "eager": 0}

    def step():
        state["eager"] += 1
        return logits(0)
    graphs = DecodeGraphs(torch.device("cpu"), ReplayBackend(lambda out: logits(0)))
    for _ in range(5):
        torch.testing.assert_close(graphs.run("key", step), logits(0))
    assert graphs.enabled and graphs.tolerated == 0
    assert state["eager"] == 1 + 2   # recording, then the two checked uses; later uses replay alone
