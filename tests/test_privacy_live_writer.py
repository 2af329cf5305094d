"""A writer that stays open (an agent's process, `ctape watch`) across a redaction or a
compaction made elsewhere must not write the removed text again.

Small blocks are compressed with a dictionary made of the writer's last raw blocks, kept in
memory and written into its next segment as a `D` record (docs/format.md section 7). A
dictionary is no entry: nothing reads it for secrets, and `compact` only drops the ones in
the files it merges. So a writer that kept, from before `ctape redact` and `ctape compact`,
the bytes of the secret's block put the secret back into a new segment at its next
dictionary, and `push` sent it (found by an audit: the bytes reached the remote). Each test
below fails without `SegmentWriter._forget_redacted` and the listing rule of `_reload`.
"""

from __future__ import annotations

from ctape import Tape
from ctape.ops.redact import redact_scan

from conftest import run_cli
from test_privacy_sync import holders

SECRET = "AKIAZ7QK3MXW2PLR5TNB"
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 10


def cli(d, *args):
    return run_cli("--dir", d, *args)


def chat_before(s, n: int = 40) -> None:
    # enough small blocks (durable appends) for the writer's dictionaries (16 KiB of material)
    for i in range(n):
        s.append("assistant", {"content": f"reply {i} {FILLER}"})


def chat_after(s, n: int = 40) -> None:
    for i in range(n):
        s.append("assistant", {"content": f"after {i} {FILLER}"})


def dictionary_texts(tape: Tape) -> list[bytes]:
    """The content of every `D` record in the tape's files."""
    import zstandard

    from ctape.store import framing

    return [zstandard.ZstdDecompressor().decompressobj().decompress(r.body)
            for rel in tape.store.list_files(None) for r in tape.store.scan_file(rel)
            if isinstance(r, framing.Record) and r.type == framing.T_DICT]


def up_to_the_next_dictionary(tape: Tape, s) -> None:
    """Appends until the writer is a few KB short of making its next (larger) dictionary of
    its recent blocks: what is appended next is in that dictionary's material."""
    from ctape.store.segment import DICT_REFRESH

    chat_before(s)
    w = tape.store._writers[s.name]
    while w.dict is None or w.dict.used + 4000 < DICT_REFRESH * len(w.dict.content):
        chat_before(s, 1)


def dictionaries(tape: Tape) -> int:
    """The `D` records in the session files: the test must have made the writer write one."""
    return len(dictionary_texts(tape))


def test_a_redaction_and_compaction_by_another_process_reach_the_open_writers_dictionary(tmp_path):
    d = tmp_path / "t"
    tape = Tape.init(d)
    try:
        s = tape.session("a")
        chat_before(s)
        s.append("user", {"content": f"my key is {SECRET} please keep it"})
        s.append("assistant", {"content": "noted"})
        assert holders(SECRET.encode(), d)
        cli(d, "redact", "--scan", "-s", "a")
        cli(d, "compact", "--grace", "now")
        assert not holders(SECRET.encode(), d), "compact took the secret out"
        chat_after(s)
        assert dictionaries(tape), "the writer made a dictionary after the compaction"
    finally:
        tape.close()
    assert not holders(SECRET.encode(), d), "the writer wrote the redacted text again in a dictionary"
    cli(d, "fsck")


def test_a_redaction_in_the_writers_own_process_reaches_its_dictionary(tmp_path):
    d = tmp_path / "t"
    tape = Tape.init(d)
    try:
        s = tape.session("a")
        chat_before(s)
        s.append("user", {"content": f"my key is {SECRET} please keep it"})
        redact_scan(tape, ["a"])
        tape.compact(grace="now")
        assert not holders(SECRET.encode(), d)
        chat_after(s)
        assert dictionaries(tape)
    finally:
        tape.close()
    assert not holders(SECRET.encode(), d)


def test_text_a_compaction_expired_does_not_come_back_in_the_open_writers_dictionary(tmp_path):
    """Not a secret the scanner knows: a branch deleted and expired (`compact --expire now`,
    the way docs/privacy.md gives for a thread that must go whole). Its text was in the
    writer's recent blocks; once compaction dropped it, no dictionary may bring it back."""
    d = tmp_path / "t"
    gone = "the-thread-that-must-go-" + "x7Qp" * 8
    tape = Tape.init(d)
    try:
        s = tape.session("a")
        chat_before(s, 20)
        s.branch("side")
        s.checkout("side")
        s.append("user", {"content": f"private: {gone}"})
        chat_before(s, 3)
        s.checkout("main")
        chat_before(s, 2)
        cli(d, "branch", "-D", "side", "-s", "a")
        cli(d, "compact", "--expire", "now", "--grace", "now")
        assert not holders(gone.encode(), d), "compact dropped the branch"
        chat_after(s)
        assert dictionaries(tape)
    finally:
        tape.close()
    assert not holders(gone.encode(), d), "the writer wrote the expired text again in a dictionary"


def test_the_open_writer_keeps_its_dictionaries_when_nothing_was_removed(tmp_path):
    """The other side: another writer's files arriving (no file gone, no redaction) leave
    the material as it was, so a session shared by two processes keeps compressing well."""
    d = tmp_path / "t"
    tape = Tape.init(d)
    try:
        s = tape.session("a")
        chat_before(s)
        cli(d, "append", "user", '{"content": "from another process"}', "-s", "a")
        chat_after(s, 2)
        assert len(tape.store._writers["a"].recent) >= 16 << 10, "the material was dropped though nothing went"
        chat_after(s, 10)
        assert dictionaries(tape)
    finally:
        tape.close()


def test_no_dictionary_made_after_a_redaction_holds_its_text(tmp_path):
    """Before any compaction: the redacted text stays in the old records until `compact`
    (and push refuses until then), but a dictionary the writer makes after the redaction
    (a new segment's, or the next larger one) does not copy it once more."""
    d = tmp_path / "t"
    tape = Tape.init(d)
    try:
        s = tape.session("a")
        up_to_the_next_dictionary(tape, s)  # the secret goes in just before the writer makes its next one
        s.append("user", {"content": f"my key is {SECRET} please keep it"})
        before = sum(SECRET.encode() in t for t in dictionary_texts(tape))
        n = dictionaries(tape)
        redact_scan(tape, ["a"])
        chat_after(s)
        assert dictionaries(tape) > n
        assert sum(SECRET.encode() in t for t in dictionary_texts(tape)) == before
    finally:
        tape.close()


def test_the_text_of_a_failed_write_never_reaches_a_dictionary(tmp_path, monkeypatch):
    """A write that fails (a full disk) writes nothing, and the caller is told so; its
    block's text was already dictionary material, and the next `D` record wrote it after
    all (found by a review). A failed or discarded write now drops the material."""
    import errno

    import ctape.store.segment as seg
    from ctape.errors import CtapeError

    d = tmp_path / "t"
    tape = Tape.init(d)
    try:
        s = tape.session("a")
        up_to_the_next_dictionary(tape, s)
        n = dictionaries(tape)

        def full_disk(fd, data):
            raise OSError(errno.ENOSPC, "No space left on device (injected)")

        with monkeypatch.context() as m:
            m.setattr(seg, "write_all", full_disk)
            try:
                s.append("user", {"content": f"my key is {SECRET}"})
                raise AssertionError("the append did not fail")
            except CtapeError:
                pass
        chat_after(s)
        assert dictionaries(tape) > n
    finally:
        tape.close()
    assert not holders(SECRET.encode(), d), "the text of the failed write is in a dictionary"
