"""json_object: a stored or printed JSON object read leniently (None where there is none)."""

from __future__ import annotations

import pytest

from abtest.config.json_object import json_object


def test_an_object_is_read_and_a_dict_passes_as_it_is() -> None:
    assert json_object('{"a": [1, 2]}') == {"a": [1, 2]}
    given = {"b": 1}
    assert json_object(given) is given


@pytest.mark.parametrize("value", [None, "", "  ", "not json", "[1, 2]", '"text"', "3", 3, b"{}"])
def test_anything_but_an_object_is_none(value: object) -> None:
    assert json_object(value) is None
