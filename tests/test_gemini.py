"""Gemini CLI sessions as a format (issue 23, item 4; SPEC 10): import, lossless export,
watch of a file written again whole, usage. The files are written by tests/gemini_cli_writer.py,
a port of gemini-cli's chatRecordingService (tests/fixtures/gemini/SOURCES.md)."""

import json
import os
from pathlib import Path

import pytest

import gemini_cli_writer as writer
from conftest import run_cli
from ctape import Tape
from ctape.formats import export_ref, import_files

FIXTURES = Path(__file__).parent / "fixtures" / "gemini"
FILES = sorted(p for p in FIXTURES.iterdir() if p.suffix in (".json", ".jsonl"))


def records(text: str) -> list:
    try:
        return [json.loads(text)]
    except ValueError:
        return [json.loads(x) for x in text.splitlines() if x.strip()]


def all_hashes(tape, session) -> set:
    s = tape.session(session)
    out = set()
    for tip in s.refs().branches.values():
        h = tip
        while h and h not in out:
            out.add(h)
            h = tape.read_entry(h).parent
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.suffix)
def test_export_gives_the_records_back_and_reimports_to_the_same_entries(tmp_path, path):
    a, b = tmp_path / "a", tmp_path / "b"
    with Tape.init(a) as t:
        import_files(t, "gemini", [str(path)], "s")
        out = "\n".join(export_ref(t, "s", "gemini")) + "\n"
        want = all_hashes(t, "s")
    assert records(out) == records(path.read_text())
    back = tmp_path / path.name
    back.write_text(out)
    with Tape.init(b) as t:
        import_files(t, None, [str(back)], "s")
        assert all_hashes(t, "s") == want


def test_a_rewind_is_a_branch_and_main_goes_on_after_it(tape):
    path = next(p for p in FILES if p.suffix == ".jsonl")
    import_files(tape, "gemini", [str(path)], "s")
    branches = tape.session("s").refs().branches
    assert sorted(branches) == ["main", "rewound-7a2b9c10"]
    said = [m.get("content") for m in tape.session("s").context(format="openai") if m["role"] == "user"]
    assert said == ["Why does `make test` fail in src/? Fix it.", "Keep `slug`; change the test to import `slug`."]
    old = [m.get("content") for m in tape.session("s").context("s/rewound-7a2b9c10", format="openai") if m["role"] == "user"]
    assert old[-1] == "No, rename the test's import instead."  # nothing is lost


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_a_file_that_grows_moves_main_forward_only(tmp_path, layout):
    """Imported after every turn (the document is written again whole each time): each
    import continues main; the end equals one import of the final file."""
    tape_dir = tmp_path / "t"
    tips = []
    with Tape.init(tape_dir) as t:
        for steps in range(1, 9):
            folder = tmp_path / f"step{steps}"
            folder.mkdir()
            r = writer.session(str(folder), layout, steps=steps)
            lines = import_files(t, "gemini", [r.path], "s")
            assert "-imported" not in lines[0], lines
            tips.append(t.session("s").refs().branches["main"])
        for older, newer in zip(tips, tips[1:]):
            h = newer
            while h and h != older:
                h = t.read_entry(h).parent
            assert h == older, "main went back or sideways"
        view = t.session("s").context(format="openai")
    with Tape.init(tmp_path / "fresh") as t:
        import_files(t, "gemini", [r.path], "s")
        assert t.session("s").context(format="openai") == view


def test_a_document_imported_again_adds_nothing(tape):
    path = next(p for p in FILES if p.suffix == ".json")
    import_files(tape, "gemini", [str(path)], "s")
    before = all_hashes(tape, "s")
    line = import_files(tape, "gemini", [str(path)], "s")[0]
    assert line.startswith("nothing new") and all_hashes(tape, "s") == before


def test_a_rewound_document_is_the_thread_main_goes_on_with(tmp_path):
    """The document written again without its last turn and with a new message (the JSON
    layout's rewind): main is the document's thread, the one the agent sends next (SPEC 10),
    and the thread before keeps a branch named as a `$rewindTo` line names it. Before
    2026-12-07 main stayed on the abandoned thread and the document's went to
    main-imported (found by an audit of watch)."""
    with Tape.init(tmp_path / "t") as t:
        full = writer.session(str(tmp_path), "json", steps=4)
        import_files(t, "gemini", [full.path], "s")
        before = t.session("s").refs().branches["main"]
        doc = json.loads(Path(full.path).read_text())
        gone = doc["messages"][2]["id"]
        older = dict(doc, messages=doc["messages"][:2])  # a backup copy of an earlier version
        doc["messages"] = doc["messages"][:2] + [{"id": "new-1", "timestamp": "2026-03-11T21:05:00.000Z", "type": "user", "content": [{"text": "start over"}]}]
        doc["lastUpdated"] = "2026-03-11T21:05:00.000Z"  # Gemini CLI sets it at every write
        Path(full.path).write_text(json.dumps(doc, indent=2))
        line = import_files(t, "gemini", [full.path], "s")[0]
        assert f"moved branch main to the imported one: the entry it named is on branch rewound-{gone[:8]}" in line, line
        b = dict(t.session("s").refs().branches)
        assert b[f"rewound-{gone[:8]}"] == before and "main-imported" not in b
        view = t.session("s").context("s", format="openai")
        assert view[-1] == {"role": "user", "content": "start over"}
        assert len(t.session("s").context(f"s/rewound-{gone[:8]}", format="openai")) > len(view) - 1
        # the same as a fresh import of the document
        with Tape.init(tmp_path / "fresh") as fresh:
            import_files(fresh, "gemini", [full.path], "s")
            assert fresh.session("s").context("s", format="openai") == view
        # an earlier message edited in place: its thread goes on as replaced-<id>
        edited = doc["messages"][1]["id"]
        doc["messages"][1] = dict(doc["messages"][1], content=[{"text": "edited"}])
        doc["lastUpdated"] = "2026-03-11T21:06:00.000Z"
        Path(full.path).write_text(json.dumps(doc, indent=2))
        import_files(t, "gemini", [full.path], "s")
        b2 = dict(t.session("s").refs().branches)
        assert b2[f"replaced-{edited[:8]}"] == b["main"]
        assert t.session("s").context("s", format="openai")[-1] == {"role": "user", "content": "start over"}
        # rewound again to the same message: the first rewind's branch stays where it is
        doc["messages"] = doc["messages"][:2] + [{"id": "new-2", "timestamp": "2026-03-11T21:06:00.000Z", "type": "user", "content": [{"text": "once more"}]}]
        doc["lastUpdated"] = "2026-03-11T21:07:00.000Z"
        Path(full.path).write_text(json.dumps(doc, indent=2))
        import_files(t, "gemini", [full.path], "s")
        b3 = dict(t.session("s").refs().branches)
        assert b3[f"rewound-{gone[:8]}"] == before and b3[f"replaced-{edited[:8]}"] == b["main"]
        assert b3["rewound-new-1"] == b2["main"]
        assert t.session("s").context("s", format="openai")[-1] == {"role": "user", "content": "once more"}
        # a rewind whose dropped message's id starts as an earlier rewind's: a name of its own
        doc["messages"] = doc["messages"][:1] + [{"id": "new-3", "timestamp": "2026-03-11T21:07:00.000Z", "type": "user", "content": [{"text": "third"}]}]
        doc["lastUpdated"] = "2026-03-11T21:08:00.000Z"
        Path(full.path).write_text(json.dumps(doc, indent=2))
        import_files(t, "gemini", [full.path], "s")
        b4 = dict(t.session("s").refs().branches)
        assert b4[f"rewound-{gone[:8]}"] == before and b4[f"rewound-{gone[:8]}-2"] == b3["main"]
        # an older version of the document (a backup copy) is no rewind: main stays, the copy
        # goes beside it (it moved main back, and the live file's next growth wrote its
        # messages again: found by a review)
        backup = tmp_path / "backup" / Path(full.path).name
        backup.parent.mkdir()
        backup.write_text(json.dumps(older, indent=2))
        line = import_files(t, "gemini", [str(backup)], "s")[0]
        assert "main-imported" in line and t.session("s").refs().branches["main"] == b4["main"], line


def test_usage_counts_each_message_once(tape):
    """tokens of each `gemini` message (written again when it changes) count once; cached
    is moved out of input, thoughts and tool-use tokens go to output and input."""
    from ctape.ops.usage import usage

    for p in FILES:
        import_files(tape, "gemini", [str(p)], None)
    for p in FILES:
        final: dict = {}
        for r in records(p.read_text()):
            for m in [r] + (r.get("messages") or []):
                if m.get("type") == "gemini" and m.get("tokens"):
                    final[m["id"]] = (m["tokens"], m.get("model"))
        sid = records(p.read_text())[0]["sessionId"]
        row = next(r for r in usage(tape) if r["session"] == sid)
        want_in = sum(t["input"] - t["cached"] + t.get("tool", 0) for t, _ in final.values())
        want_out = sum(t["output"] + t.get("thoughts", 0) for t, _ in final.values())
        want_cached = sum(t["cached"] for t, _ in final.values())
        assert (row["input"], row["output"], row["cached"]) == (want_in, want_out, want_cached), row
        assert row["models"] == ["gemini-2.5-pro"] and row["cost"] and not row["unpriced_tokens"]


def test_watch_follows_a_document_written_again_in_place(tmp_path, tape_dir):
    """watch --once after each turn: the file is rewritten in place (same inode, new bytes
    at the top: lastUpdated); every pass appends what is new and main only moves on."""
    chats = tmp_path / "home" / ".gemini" / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    env = {"GEMINI_CLI_HOME": str(tmp_path / "home"), "HOME": str(tmp_path / "home")}
    seen = []
    for steps in (2, 4, 5, 8):
        r = writer.session(str(chats), "json", steps=steps)  # in place: the writer truncates and writes
        p = run_cli("--dir", tape_dir, "watch", "--once", env=env)
        err = p.stderr.decode()
        assert p.returncode == 0 and "went another way" not in err and "-imported" not in err, err
        seen.append(err)
    with Tape.open(tape_dir) as t:
        sid = "5d1e3a90-2b7c-4f0e-9a51-0c3b8f6d2e47"
        assert list(t.session(sid).refs().branches) == ["main"]
        view = t.session(sid).context(format="openai")
    with Tape.init(tmp_path / "fresh") as t:
        import_files(t, "gemini", [r.path], "s")
        assert t.session("s").context(format="openai") == view
    assert all("+" in e for e in seen), seen


def test_watch_follows_a_document_through_a_rewind(tmp_path, tape_dir):
    """Gemini CLI's rewind writes the document again without the later messages: the next
    pass makes its thread main (what the agent sends next: `context`), the old one a
    `rewound-*` branch, as the JSON Lines layout's `$rewindTo` does (found by an audit:
    main stayed on the abandoned thread, the live one went to main-imported)."""
    chats = tmp_path / "home" / ".gemini" / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    env = {"GEMINI_CLI_HOME": str(tmp_path / "home"), "HOME": str(tmp_path / "home")}
    r = writer.session(str(chats), "json", steps=6)
    assert run_cli("--dir", tape_dir, "watch", "--once", env=env).returncode == 0
    doc = json.loads(Path(r.path).read_text())
    gone = doc["messages"][3]["id"]
    doc["messages"] = doc["messages"][:3] + [{"id": "again-1", "timestamp": "2026-03-11T21:09:00.000Z", "type": "user", "content": [{"text": "do it differently"}]}]
    doc["lastUpdated"] = "2026-03-11T21:09:00.000Z"
    Path(r.path).write_text(json.dumps(doc, indent=2))
    p = run_cli("--dir", tape_dir, "watch", "--once", env=env)
    assert p.returncode == 0 and "-imported" not in p.stderr.decode(), p.stderr
    sid = "5d1e3a90-2b7c-4f0e-9a51-0c3b8f6d2e47"
    with Tape.open(tape_dir) as t:
        got = t.session(sid).refs().branches
        assert sorted(got) == ["main", f"rewound-{gone[:8]}"]
        view = t.session(sid).context(format="openai")
        assert view[-1] == {"role": "user", "content": "do it differently"}
    with Tape.init(tmp_path / "fresh") as t:
        import_files(t, "gemini", [r.path], "s")
        assert t.session("s").context(format="openai") == view


@pytest.mark.parametrize("cache", ["lost", "one pass behind"])
def test_watch_through_a_rewind_after_a_lost_or_stale_cache(tmp_path, tape_dir, cache):
    """A JSON Lines file read up to a point before its `$rewindTo`, then (after the cache
    was lost, or put back one pass behind the tape: a watcher killed between a batch's sync
    and its cache's) read whole: main is the rewound-to thread, as one import lays it out.
    It stayed on the abandoned thread, the new one on main-imported (found by an audit)."""
    import shutil

    fixture = Path(__file__).parent / "fixtures" / "gemini" / "session-2026-03-11T21-02-7a2b9c10.jsonl"
    lines = fixture.read_bytes().splitlines(keepends=True)
    rewind = next(i for i, x in enumerate(lines) if b"$rewindTo" in x)
    chats, caches = tmp_path / "chats", tmp_path / "caches"
    chats.mkdir()
    env = {"CTAPE_CACHE_DIR": str(caches / "live")}
    path = chats / fixture.name
    path.write_bytes(b"".join(lines[:rewind - 3]))  # past the request the rewind drops
    run_cli("--dir", tape_dir, "watch", "--once", chats, env=env, check=True)
    if cache == "one pass behind":
        shutil.copytree(caches / "live", caches / "behind")
        path.write_bytes(b"".join(lines[:rewind - 1]))
        run_cli("--dir", tape_dir, "watch", "--once", chats, env=env, check=True)
        shutil.rmtree(caches / "live")
        shutil.copytree(caches / "behind", caches / "live")
    else:
        shutil.rmtree(caches / "live")
    path.write_bytes(b"".join(lines))
    p = run_cli("--dir", tape_dir, "watch", "--once", chats, env=env, check=True)
    assert "-imported" not in p.stderr.decode(), p.stderr.decode()
    sid = "7a2b9c10-4d5e-4f60-8a71-92b3c4d5e6f7"
    with Tape.open(tape_dir) as t:
        got, view = dict(t.session(sid).refs().branches), t.session(sid).context(format="openai")
    with Tape.init(tmp_path / "fresh") as t:
        import_files(t, "gemini", [str(path)], None)
        assert dict(t.session(sid).refs().branches) == got
        assert t.session(sid).context(format="openai") == view


def test_watch_follows_a_jsonl_file_through_a_rewind(tmp_path, tape_dir):
    """The JSON Lines layout only grows; a `$rewindTo` line makes the new thread main (as a
    fresh import lays it out) and the old one a branch, with no `-imported` copy."""
    chats = tmp_path / "chats"
    chats.mkdir()
    for steps in (5, 6, 8):
        for f in chats.iterdir():
            f.unlink()
        r = writer.session(str(chats), "jsonl", steps=steps)
        p = run_cli("--dir", tape_dir, "watch", "--once", chats)
        assert p.returncode == 0 and "-imported" not in p.stderr.decode(), p.stderr
    with Tape.open(tape_dir) as t:
        sid = "5d1e3a90-2b7c-4f0e-9a51-0c3b8f6d2e47"
        got = t.session(sid).refs().branches
        view = t.session(sid).context(format="openai")
    with Tape.init(tmp_path / "fresh") as t:
        import_files(t, "gemini", [r.path], "s")
        assert sorted(t.session("s").refs().branches) == sorted(got)
        assert t.session("s").context(format="openai") == view


def test_a_native_session_exports_to_a_file_gemini_reads(tape, tmp_path):
    s = tape.session("n")
    s.append("user", {"content": "list src"})
    s.append("tool_call", {"call_id": "c1", "name": "list_directory", "arguments": {"path": "src"}})
    s.append("tool_result", {"call_id": "c1", "output": "a.py"})
    s.append("assistant", {"content": "src holds a.py"})
    out = list(export_ref(tape, "n", "gemini"))
    recs = [json.loads(x) for x in out]
    assert recs[0]["sessionId"] == "n" and "projectHash" in recs[0]
    path = tmp_path / "n.jsonl"
    path.write_text("\n".join(out) + "\n")
    import_files(tape, None, [str(path)], "back")
    assert tape.session("back").context(format="openai") == s.context(format="openai")


def test_import_cli_and_stdin(tape_dir):
    path = next(p for p in FILES if p.suffix == ".jsonl")
    p = run_cli("--dir", tape_dir, "import", "gemini", "-", "-s", "g", input=path.read_bytes())
    assert p.returncode == 0 and "imported 30 records from stdin into session g" in p.stderr.decode(), p.stderr
    p = run_cli("--dir", tape_dir, "export", "g", "--format", "gemini", check=True)
    assert records(p.stdout.decode()) == records(path.read_text())


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.mark.parametrize("image", [
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},  # Claude
    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},  # Codex, Responses
    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},  # Chat Completions
], ids=["claude", "codex", "openai"])
def test_images_and_thinking_of_other_agents_export_as_gemini_parts(tape, tmp_path, image):
    """An image from any agent goes out as inlineData, a Claude thinking block as a thought
    part: never as the JSON of the part, or base64 in a text part, that the model would
    then be sent as text after a re-import (found by an audit)."""
    s = tape.session("src")
    s.append("user", {"content": [{"type": "text", "text": "what is in this picture?"}, image]})
    s.append("assistant", {"content": [{"type": "thinking", "thinking": "a tiny png", "signature": "c2ln"}, {"type": "text", "text": "a dot"}]})
    lines = [json.loads(x) for x in export_ref(tape, "src", "gemini")]
    parts = [p for rec in lines if isinstance(rec.get("content"), list) for p in rec["content"]]
    assert {"inlineData": {"mimeType": "image/png", "data": PNG}} in parts
    assert {"text": "a tiny png", "thought": True} in parts
    assert not [p for p in parts if PNG in p.get("text", "") or "signature" in p.get("text", "")]
    out = tmp_path / "back.jsonl"
    out.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    import_files(tape, "gemini", [str(out)], "back")
    ctx = tape.session("back").context()
    user = [m for m in ctx if m["role"] == "user"][0]
    assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}} in user["content"]
    assert [m["content"] for m in ctx if m["role"] == "assistant"] == ["a dot"]
