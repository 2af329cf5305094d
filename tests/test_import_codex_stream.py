"""A Codex rollout is imported in one pass, each line parsed once (issue 25, import speed):
lines wait while the session, the first time or an event's run is not known yet, and past
formats.codex.HOLD bytes their values are dropped and read again. Whatever waits, the
entries are the ones the two-pass import gave: their hashes are pinned here, computed by
that import, for shapes that make lines wait (the session id last, events that are the
only record of their message, lines that are not JSON, a cut last line, no time at all).
"""

import json
import os

import pytest
from blake3 import blake3

from ctape import Tape
from ctape.errors import InvalidInput
from ctape.formats import codex, import_files
from ctape.formats._common import entries_for_export

SOURCE = os.path.join(os.path.dirname(__file__), "fixtures", "transcripts", "codex-rollout",
                      "madshn__localpush__rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl")
MTIME = 1767225600  # 2026-01-01T00:00:00Z: the time of a file whose records carry none


def records() -> list[dict]:
    with open(SOURCE, "rb") as f:
        return [json.loads(x) for x in f if x.strip()][:900]  # enough of each shape


def is_message(r: dict) -> bool:
    p = r.get("payload") or {}
    return r.get("type") == "response_item" and p.get("type") == "message" and p.get("role") in ("user", "assistant")


def undated(r: dict) -> dict:
    r = json.loads(json.dumps(r))
    r.pop("timestamp", None)
    if isinstance(r.get("payload"), dict):
        r["payload"].pop("timestamp", None)
    return r


def shapes() -> dict[str, list[str]]:
    rs = records()
    lines = [json.dumps(r, ensure_ascii=False) for r in rs]
    return {
        "as is": lines,
        "session id last": lines[1:] + lines[:1],
        "events only": [json.dumps(r, ensure_ascii=False) for r in rs if not is_message(r)],
        "not JSON": lines[:10] + ["not json {"] + lines[10:500] + ["\u00ff raw"] + lines[500:] + ['{"timestamp": "2026-'],
        "no time": [json.dumps(undated(r), ensure_ascii=False) for r in rs],
    }


PINNED = {
    "as is": (900, "f562695186941de05661e2cf61bb88db008b5427deb277fdfd719aa8268c44af"),
    "session id last": (900, "917777c4cff3cf6595f075b69d92b85a41c5bdc10d39d4329cf3f5f778f525f1"),
    "events only": (808, "5976e5237dceee7f0c819ee1cdae41010d374c7565e0ba186a20125076c483ae"),
    "not JSON": (902, "02839ae6137261b29119d8165542efb15ecaee2c38b356dd770247c0334b5d37"),
    "no time": (900, "9ceb7f294c4bc7da3aff3a3a7c0bcc5858f0d64ef0476b72ac7a0a9d201d06ae"),
}


def write(path, lines: list[str]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))  # no line end after the last: it may be cut
    os.utime(path, (MTIME, MTIME))
    return str(path)


def digest(tape) -> tuple[int, str]:
    hashes = [e.hash for name in tape.session_names() for e in entries_for_export(tape, name)]
    return len(hashes), blake3("\n".join(hashes).encode()).hexdigest()


@pytest.mark.parametrize("shape, hold", [("as is", None)] + [(shape, 3000) for shape in sorted(PINNED)])
def test_the_one_pass_import_gives_the_two_pass_entries(tmp_path, monkeypatch, shape, hold):
    if hold is not None:
        monkeypatch.setattr(codex, "HOLD", hold)  # values dropped and read again all the time
    path = write(tmp_path / "rollout-2026-02-23T12-54-34-019c8a59.jsonl", shapes()[shape])
    with Tape.init(tmp_path / "tape") as t:
        out = import_files(t, "codex", [path], None)
        assert digest(t) == PINNED[shape], out


def test_a_file_without_a_record_is_refused_and_nothing_written(tmp_path, monkeypatch):
    monkeypatch.setattr(codex, "HOLD", 100)
    path = write(tmp_path / "x.jsonl", [json.dumps({"n": i, "text": "x" * 50}) for i in range(200)])
    with Tape.init(tmp_path / "tape") as t:
        with pytest.raises(InvalidInput, match="no Codex rollout record"):
            import_files(t, "codex", [path], None)
        assert t.session_names() == []
