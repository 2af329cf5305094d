"""A long-lived process on a tape (an agent using the API), for tests/test_listing_reuse.py:
appends to session `s` or reads its HEAD, one command a line on stdin, one JSON line out.

    python listing_writer.py DIR        # then: "append TEXT", "head", "quit"
"""

import json
import sys

from ctape import Tape

t = Tape.open(sys.argv[1])
s = t.session("s")
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd.startswith("append "):
        e = s.append("user", {"content": cmd[len("append "):]})
        print(json.dumps({"hash": e.hash, "parent": e.parent}), flush=True)
    elif cmd == "head":
        h = s.head
        print(json.dumps({"hash": h.hash if h else None}), flush=True)
    else:
        break
t.close()
