"""Entry's own __init__ (models._entry_init: slots set directly, faster than the frozen
dataclass's) must stay the dataclass's in every way a caller sees."""

import copy
import dataclasses
import inspect
import pickle

import pytest

from ctape.model.models import Entry


def test_init_takes_every_field_in_order():
    params = list(inspect.signature(Entry).parameters.values())
    fields = dataclasses.fields(Entry)
    assert [p.name for p in params] == [f.name for f in fields]
    assert [p.default for p in params] == [inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default for f in fields]


def test_an_entry_is_frozen_equal_and_copyable():
    e = Entry("h", None, 1, "user", "2026-01-01T00:00:00.000000Z", {"content": "x"}, {})
    k = Entry(hash="h", parent=None, seq=1, kind="user", time="2026-01-01T00:00:00.000000Z", payload={"content": "x"}, meta={}, delta=None)
    assert e == k and e.delta is None
    assert [getattr(e, f.name) for f in dataclasses.fields(Entry)] == ["h", None, 1, "user", "2026-01-01T00:00:00.000000Z", {"content": "x"}, {}, None]
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.seq = 2
    assert pickle.loads(pickle.dumps(e)) == e and copy.deepcopy(e) == e
    assert dataclasses.replace(e, seq=2).seq == 2
    with pytest.raises(TypeError):
        Entry("h")
    with pytest.raises(TypeError):
        Entry("h", None, 1, "user", "t", {}, {}, None, "one too many")
