"""Write the seed corpus of tape files the fuzz harness mutates (tests/fuzz/corpus/).

    PYTHONPATH=. python tests/fuzz/make_corpus.py

Real files made by the real code, small enough to keep in the repository: a segment of
durable appends (blocks, a dictionary and blocks compressed with it, a large object, a
stream's partial records), a segment of batched appends with branches and checkouts,
and the pack `compact` makes of both. Run it again when the format changes; the
harness also takes the older tape in tests/fixtures/tapes/v1-records.
"""

import glob
import os
import shutil
import sys
import tempfile

from ctape import Tape

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def build(root: str) -> None:
    os.environ["CTAPE_WRITER"] = "fuzzseed0001"
    t = Tape.init(root)
    s = t.session("chat")
    s.append("system", {"content": "You are a careful coding agent."}, time="2026-11-01T10:00:00Z")
    for i in range(48):  # enough small durable blocks for a dictionary and Z blocks after it
        s.append("user", {"content": f"step {i}: run the tests and fix what fails in module {i % 7}"}, meta={"tokens": i}, delta={"step": i})
        s.append("tool_call", {"call_id": f"c{i}", "name": "bash", "arguments": {"cmd": f"pytest -k t{i}"}})
        s.append("tool_result", {"call_id": f"c{i}", "output": f"{i} passed\n" * (3 + i % 5)})
    s.append("tool_result", {"call_id": "big", "output": "line of a large file\n" * 4000})  # an O record
    s.branch("before-fix")
    s.append("assistant", {"content": "\0x leading NUL and café"})
    with s.stream(flush_interval=60) as w:
        w.write("The failing test ")
        w.flush()
        w.write("was flaky.")
    b = t.session("batch")
    with t.batch():
        for i in range(30):
            b.append("user" if i % 2 else "assistant", {"content": f"batched {i}"}, delta={"n": i})
    b.checkout("batch~5", new_branch="retry")
    b.append("error", {"message": "boom", "call_id": "x"})
    b.checkout("main")
    b.delete_branch("retry")
    t.close()


def main() -> None:
    os.makedirs(HERE, exist_ok=True)
    for old in glob.glob(os.path.join(HERE, "*.seg")) + glob.glob(os.path.join(HERE, "*.pack")):
        os.remove(old)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CTAPE_CACHE_DIR"] = os.path.join(tmp, "cache")
        root = os.path.join(tmp, "t")
        build(root)
        for session in ("chat", "batch"):
            for path in glob.glob(os.path.join(root, "sessions", session, "*.seg")):
                shutil.copy(path, os.path.join(HERE, f"{session}.seg"))
        t = Tape.open(root)
        t.compact(grace="now")
        t.close()
        for session in ("chat", "batch"):
            for path in glob.glob(os.path.join(root, "sessions", session, "*.pack")):
                shutil.copy(path, os.path.join(HERE, f"{session}.pack"))
    for name in sorted(os.listdir(HERE)):
        print(name, os.path.getsize(os.path.join(HERE, name)), file=sys.stderr)


if __name__ == "__main__":
    main()
