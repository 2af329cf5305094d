"""Tape.close() in one thread while another works on the same Tape."""

import threading

import pytest


def test_a_close_in_another_thread_as_a_stream_begins_raises_nothing_of_its_own(tmp_path, monkeypatch):
    """A stream told the Tape of itself before its flush thread started: a close() in
    another thread at that moment raised a bare RuntimeError ("cannot join thread before it
    is started"; found by an audit of concurrency, 8 of 30 runs). Here the close lands there
    deterministically: as the stream's thread starts."""
    import ctape.history.stream as stream_mod
    from ctape import Tape
    from ctape.errors import CtapeError

    t = Tape.init(str(tmp_path / "t"))
    s = t.session("s")
    s.append("user", {"content": "a poem?"})
    closed = []

    class ClosingThread(threading.Thread):
        def start(self):
            if not closed:
                closed.append(1)
                t.close()  # what another thread does at this instant
            super().start()

    monkeypatch.setattr(stream_mod.threading, "Thread", ClosingThread)
    with pytest.raises(CtapeError):
        with s.stream() as w:
            w.write("Roses are")
    assert closed
