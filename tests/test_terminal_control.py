"""No terminal control character from outside reaches the terminal through ctape's own
lines (SPEC 13: human output never passes them through; escape them).

Payloads, titles and refs were escaped where they are shown; the lines around them were
not: a file's path in an error or in `import`'s summary, a tape's path from `init`, a
remote's address in `remote list` / `remote show`, a clone's folder, the name of a foreign
file `fsck` warns of. An escape sequence in a file name then cleared the screen or set
the window's title (OSC passes click's own stripping of colours). Now stderr writes every
control character as an escape (tab, newline and the progress line's carriage return
kept), and the lines on stdout that name such things escape them. (Found by an audit.)"""

import os

from conftest import run_cli

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "transcripts", "claude-code")
BAD = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"  # set the title, clear the screen, a C1 CSI, a bidi override


def raw_controls(b: bytes) -> list[str]:
    text = b.decode("utf-8", "replace")
    return [c for c in text if (ord(c) < 0x20 and c not in "\t\n\r") or 0x7F <= ord(c) <= 0x9F or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"]


def test_names_from_outside_are_escaped_in_every_line(tmp_path):
    src = sorted(f for f in os.listdir(FIXTURES) if f.endswith(".jsonl"))[0]
    bad_file = tmp_path / f"x{BAD}.jsonl"
    bad_file.write_bytes(open(os.path.join(FIXTURES, src), "rb").read())
    remote = tmp_path / f"remote{BAD}"
    remote.mkdir()
    tape = tmp_path / "T"
    runs = [
        ("init", tmp_path / f"new{BAD}"),
        ("--dir", tape, "init"),
        ("--dir", tape, "import", bad_file, "-s", "chat"),
        ("--dir", tape, "import", tmp_path / f"missing{BAD}.jsonl", "-s", "other"),
        ("--dir", tmp_path / f"nowhere{BAD}", "log"),
        ("--dir", tape, "remote", "add", "o", f"file://{remote}"),
        ("--dir", tape, "push", "o"),
        ("--dir", tape, "remote", "list"),
        ("--dir", tape, "remote", "show", "o"),
        ("clone", f"file://{remote}", tmp_path / f"copy{BAD}"),
        ("--dir", tape, "usage", "--prices", tmp_path / f"prices{BAD}.json"),
    ]
    seen, outs = 0, []
    for args in runs:
        p = run_cli(*args, cwd=tmp_path)
        for stream in (p.stdout, p.stderr):
            assert not raw_controls(stream), (args, stream)
        seen += b"\\x1b]0;pwned\\x07" in p.stdout + p.stderr
        outs.append(p.stdout + p.stderr)
    assert seen >= 9, outs  # each line names the path, escaped
    (tape / "sessions" / "chat" / f"stray{BAD}").write_bytes(b"")
    p = run_cli("--dir", tape, "fsck", cwd=tmp_path)
    assert b"stray\\x1b]0;pwned" in p.stdout + p.stderr and not raw_controls(p.stdout + p.stderr), p
