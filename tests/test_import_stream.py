"""`ctape import claude-code` parses each line once (issue 25): it lays lines out while
reading them, up to the first message whose parent is not laid out yet, and from there on
as before. The result must be the one the layout of the whole file gives: the same as
`ctape watch` of the file (which lays out the whole file in one go), entry for entry and
ref for ref, on shapes that stop the early layout or change what it keeps.
"""

import json

import pytest
from test_watch import CLAUDE, CLAUDE_FORKS, entry_hashes, expected, exported, refs_of, session_of, with_forks

from ctape import Tape
from ctape.formats import claude_code, import_files
from ctape.watch import watch_once


def recs(data: bytes) -> list[bytes]:
    return [x + b"\n" for x in data.split(b"\n") if x.strip()]


def garbage_and_blanks(data: bytes) -> bytes:
    rows = recs(data)
    rows.insert(len(rows) // 3, b'{"half a record", "never finished\n')
    rows.insert(len(rows) // 2, b"\n\n")
    return b"".join(rows)


def parent_later(data: bytes) -> bytes:
    """A message written before its parent (the layout waits for it)."""
    rows = recs(data)
    i = next(k for k in range(len(rows) // 2, len(rows)) if json.loads(rows[k]).get("parentUuid") and json.loads(rows[k]).get("type") in ("user", "assistant"))
    rows[i - 1], rows[i] = rows[i], rows[i - 1]
    return b"".join(rows)


def untimed_prelude(data: bytes) -> bytes:
    """Bookkeeping first, and the first message without a time (it takes the first time found)."""
    rows = [json.loads(x) for x in recs(data)]
    first = next(k for k, r in enumerate(rows) if r.get("type") in ("user", "assistant"))
    rows[first].pop("timestamp", None)
    pre = [{"type": "summary", "summary": f"s{k}", "leafUuid": f"leaf-{k}"} for k in range(3)]
    return b"".join(json.dumps(r).encode() + b"\n" for r in pre + rows)


def missing_parent(data: bytes) -> bytes:
    """The first message's parent is in no file (a resumed session): laid out as a root."""
    rows = [json.loads(x) for x in recs(data)]
    first = next(k for k, r in enumerate(rows) if r.get("type") in ("user", "assistant"))
    rows[first]["parentUuid"] = "00000000-0000-0000-0000-00000000dead"
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


SHAPES = {
    "plain": lambda d: d,
    "forks": with_forks,
    "garbage-and-blanks": garbage_and_blanks,
    "parent-later": parent_later,
    "untimed-prelude": untimed_prelude,
    "missing-parent": missing_parent,
}


@pytest.mark.parametrize("hold", [claude_code.HOLD, 0])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_import_lays_out_as_the_whole_file_does(tmp_path, monkeypatch, shape, hold):
    monkeypatch.setattr(claude_code, "HOLD", hold)  # 0: no parsed value is kept for later
    src = CLAUDE_FORKS if shape == "plain" else CLAUDE
    data = SHAPES[shape](src) if shape == "forks" else SHAPES[shape](src.read_bytes())
    path = tmp_path / "src" / src.name
    path.parent.mkdir()
    path.write_bytes(data)
    name = session_of(src, "claude-code")
    with Tape.init(tmp_path / "imported") as a, Tape.init(tmp_path / "watched") as b:
        import_files(a, "claude-code", [str(path)], None)
        assert not watch_once(b, [str(path)]).errors
        assert refs_of(a, name) == refs_of(b, name)
        assert entry_hashes(a, name) == entry_hashes(b, name)
        assert exported(a, name, "claude-code") == expected(data)
