"""The decode forward's stacked projections (steadytune/model/decode/runner.py: q|k|v and gate|up as one matmul over
their weights stacked): the layers' own weights become views of the stacked tensor, so the model computes and saves
as before and nothing is held twice; a runner planned again finds them stacked; what cannot be stacked is left
alone."""

from __future__ import annotations

import torch

from steadytune.model.decode.runner import stack_linears


def frozen_linears(widths, bias=True, width_in=12):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(width_in, w, bias=bias) for w in widths]
    for layer in layers:
        layer.requires_grad_(False)
    return layers


def test_stacked_weights_are_the_layers_own_and_compute_the_same():
    layers = frozen_linears([8, 4, 4])
    x = torch.randn(3, 12)
    before = [layer(x) for layer in layers]
    weight, bias = stack_linears(layers)
    assert weight.shape == (16, 12) and bias.shape == (16,)
    torch.testing.assert_close(torch.nn.functional.linear(x, weight, bias), torch.cat(before, dim=1))
    for layer, out in zip(layers, before):
        assert layer.weight.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()
        torch.testing.assert_close(layer(x), out)
    with torch.no_grad():
        layers[1].weight.mul_(2)          # a change through a layer (peft's merge) is seen by the stacked matmul
    torch.testing.assert_close(torch.nn.functional.linear(x, weight, bias)[:, 8:12], layers[1](x))
    again, _ = stack_linears(layers)      # planned again: the same memory, not a copy
    assert again.data_ptr() == weight.data_ptr() and torch.equal(again, weight)


def test_what_cannot_be_stacked_is_left_alone():
    trainable = [torch.nn.Linear(12, 4), torch.nn.Linear(12, 4)]
    assert stack_linears(trainable) is None
    mixed = frozen_linears([4]) + frozen_linears([4], bias=False)
    assert stack_linears(mixed) is None
    other_input = frozen_linears([4]) + frozen_linears([4], width_in=6)
    assert stack_linears(other_input) is None
    assert stack_linears(frozen_linears([4]) + [torch.nn.Identity()]) is None
    for layer in mixed + other_input:
        assert layer.weight.is_contiguous() and layer.weight.storage_offset() == 0
