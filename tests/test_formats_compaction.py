"""Where an imported agent compacted its history (issue 23, item 1): `ctape serve` shows
the boundary and folds what came before it, as `context` starts after it
(tests/test_oracle.py checks `context` itself against the raw files)."""

import re
import threading

from ctape import Tape
from ctape.formats import import_files
from ctape.web import make_server

from test_oracle import FIXTURES, compacted_copy
from test_serve import get

CODEX = FIXTURES / "codex-rollout" / "madshn__localpush__rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl"
CLAUDE = FIXTURES / "claude-code" / "daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"


def _page(tape_dir, session: str, at: str) -> str:
    t = Tape.open(tape_dir)
    httpd = make_server(t, "127.0.0.1", 0)
    th = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    try:
        status, _, body = get(httpd.server_address[1], f"/s/{session}?at={at}")
        assert status == 200
        return body
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.close()


def _soon_after_the_boundary(t, session: str) -> str:
    """An entry a few messages into the view, so that a page ending there holds the boundary
    (a page shows 100 entries)."""
    view = [e for e in t.session(session).context(format="tape") if e.get("hash") and e["kind"] != "system"]
    return view[5]["hash"]


def _folded(body: str) -> tuple[str, str]:
    """(what the compaction fold holds, what follows it)."""
    m = re.search(r'<details class="hidden-run compacted-run"><summary>(\d+) entr(?:y|ies) before the agent compacted', body)
    assert m, "no fold before the compaction boundary"
    return body[m.start():], body[: m.start()]


def test_serve_folds_claude_code_history_before_the_boundary(tape_dir, tmp_path):
    path = tmp_path / "compacted.jsonl"
    summary, _ = compacted_copy(CLAUDE, path)
    t = Tape.open(tape_dir)
    import_files(t, "claude-code", [str(path)], "cc")
    s = t.session("cc")
    in_view = {e["hash"] for e in s.context(format="tape")}
    last_call = [e["hash"] for e in s.context(format="tape", policies=["whole-tape"]) if e["kind"] == "tool_call" and e["hash"] not in in_view][-1]
    at = _soon_after_the_boundary(t, "cc")
    t.close()
    body = _page(tape_dir, "cc", at)
    rest, _ = _folded(body)
    fold_end = rest.index("compaction boundary: the agent&#x27;s history was replaced here") if "&#x27;" in rest else rest.index("compaction boundary")
    assert f'data-hash="{last_call}"' in rest[:fold_end], "a call from before the boundary is outside the fold"
    assert summary.split(".")[0] in rest[fold_end:]


def test_serve_folds_codex_history_before_the_compacted_line(tape_dir):
    t = Tape.open(tape_dir)
    import_files(t, "codex", [str(CODEX)], "cx")
    at = _soon_after_the_boundary(t, "cx")
    t.close()
    body = _page(tape_dir, "cx", at)
    rest, _ = _folded(body)
    assert 'class="msg anchor compaction"' in rest
