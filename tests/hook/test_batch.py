"""Samples per batch, read from the batch's structure."""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import torch

from gpumon.hook.batch import count_samples

Pair = namedtuple("Pair", "inputs labels")


def test_tensor_and_nested_structures() -> None:
    images = torch.zeros(8, 3, 4, 4)
    assert count_samples(images) == 8
    assert count_samples(torch.tensor(3.0)) == 1
    assert count_samples((images, torch.zeros(8))) == 8
    assert count_samples([images, torch.zeros(8)]) == 8
    assert count_samples({"input_ids": torch.zeros(5, 128), "labels": torch.zeros(5)}) == 5
    assert count_samples(OrderedDict(x=[torch.zeros(6, 2)])) == 6
    assert count_samples(Pair(torch.zeros(7, 2), torch.zeros(7))) == 7
    assert count_samples(((torch.zeros(2, 9),),)) == 2


def test_lists_of_samples_count_their_length() -> None:
    assert count_samples([{"text": "a"}, {"text": "b"}, {"text": "c"}]) == 3
    assert count_samples(["a", "b"]) == 2
    assert count_samples([1, 2, 3, 4]) == 4
    assert count_samples(([" x", "y"], torch.zeros(2))) == 2
    assert count_samples([]) == 0


def test_unknown_structures_say_so() -> None:
    assert count_samples(object()) is None
    assert count_samples({}) is None
    deep = torch.zeros(3)
    for _ in range(10):
        deep = (deep,)
    assert count_samples(deep) is None


class ShapedFloat(float):
    shape = ()


class ShapedDict(dict):
    shape = (9,)


def test_the_remembered_types_keep_the_rules() -> None:
    """The per-type shortcuts (Mapping checks, followed item types) count as the first walk did, the second time too."""
    for _ in range(2):
        assert count_samples([torch.zeros(5, 2), torch.zeros(5)]) == 5
        assert count_samples((torch.zeros(3),)) == 3
        assert count_samples([ShapedFloat(1.0), ShapedFloat(2.0)]) == 2  # numbers are samples, shape or not
        assert count_samples([ShapedDict(), ShapedDict()]) == 2  # so are mappings
        assert count_samples(ShapedDict(a=torch.zeros(4))) == 9  # a batch's own shape comes first
        assert count_samples([[torch.zeros(6)]]) == 6
        assert count_samples([object()]) is None
