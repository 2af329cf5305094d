"""Gemini CLI's session writer, ported to Python for the tests (no real Gemini CLI session
file with a license that allows copying it was found: see tests/fixtures/gemini/SOURCES.md).

A line-for-line port of what google-gemini/gemini-cli writes, from
packages/core/src/services/chatRecordingService.ts:

- `layout="jsonl"` (since f744913584, 2026-04-09): the metadata line, then every change
  appended: a message in full (again when it changes), `{"$set": {...}}` (lastUpdated after
  each message), `{"$rewindTo": id}`;
- `layout="json"` (before it): the whole `ConversationRecord` written again in place after
  each change, `JSON.stringify(conversation, null, 2)`, `lastUpdated` set at each write,
  nothing written until the first message; a rewind truncates the messages.

Key order is JavaScript's (insertion order; `undefined` values are left out). Times come
from a fixed clock so that the files are the same at every run.
"""

from __future__ import annotations

import datetime
import json
import os
import uuid


class Clock:
    def __init__(self, start: str, step: float = 1.3):
        self.t = datetime.datetime.fromisoformat(start.replace("Z", "+00:00"))
        self.step = datetime.timedelta(seconds=step)

    def now(self) -> str:
        self.t += self.step
        return self.t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.t.microsecond // 1000:03d}Z"


class Recorder:
    def __init__(self, folder: str, session_id: str, project_hash: str, layout: str, clock: Clock, kind: str = "main"):
        self.layout, self.clock = layout, clock
        self.session_id = session_id
        stamp = clock.t.strftime("%Y-%m-%dT%H-%M")
        self.path = os.path.join(folder, f"session-{stamp}-{session_id[:8]}.{layout}")
        self.queued_thoughts: list = []
        self.queued_tokens = None
        self.ids = (str(uuid.UUID(int=(int(session_id[:8], 16) << 96) + n)) for n in range(1, 1 << 30))
        now = clock.now()
        if layout == "jsonl":
            meta = {"sessionId": session_id, "projectHash": project_hash, "startTime": now, "lastUpdated": now, "kind": kind}
            self.conv = {**meta, "messages": []}
            self._append(meta)
        else:
            self.conv = {"sessionId": session_id, "projectHash": project_hash, "startTime": now, "lastUpdated": now, "messages": [], "kind": kind}
            self.last_written = None

    # -- writing -------------------------------------------------------------------------

    def _append(self, record) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")

    def _write(self, allow_empty: bool = False) -> None:
        """The legacy writeConversation: skip while empty and when nothing changed."""
        if not self.conv["messages"] and not allow_empty:
            return
        content = json.dumps(self.conv, ensure_ascii=False, indent=2)
        if content == self.last_written:
            return
        self.conv["lastUpdated"] = self.clock.now()
        self.last_written = json.dumps(self.conv, ensure_ascii=False, indent=2)
        with open(self.path, "w", encoding="utf-8") as f:  # writeFileSync: in place, same inode
            f.write(self.last_written)

    def _push(self, msg: dict) -> None:
        msgs = self.conv["messages"]
        i = next((k for k, m in enumerate(msgs) if m["id"] == msg["id"]), None)
        if i is None:
            msgs.append(msg)
        else:
            msgs[i] = msg
        if self.layout == "jsonl":
            self._append(msg)

    def _set(self, updates: dict) -> None:
        self.conv.update(updates)
        self._append({"$set": updates})

    # -- what ChatRecordingService does ----------------------------------------------------

    def message(self, type_: str, content, model=None, display=None) -> str:
        msg = {"id": next(self.ids), "timestamp": self.clock.now(), "type": type_, "content": content}
        if display is not None:
            msg["displayContent"] = display
        if type_ == "gemini":
            msg["thoughts"] = self.queued_thoughts
            msg["tokens"] = self.queued_tokens
            if model is not None:
                msg["model"] = model
            self.queued_thoughts, self.queued_tokens = [], None
        self._push(msg)
        if self.layout == "jsonl":
            self._set({"lastUpdated": self.clock.now()})
        else:
            self._write()
        return msg["id"]

    def thought(self, subject: str, description: str) -> None:
        self.queued_thoughts.append({"subject": subject, "description": description, "timestamp": self.clock.now()})

    def tokens(self, prompt: int, candidates: int, cached: int = 0, thoughts: int = 0, tool: int = 0) -> None:
        tokens = {"input": prompt, "output": candidates, "cached": cached, "thoughts": thoughts, "tool": tool, "total": prompt + candidates + thoughts + tool}
        last = self.conv["messages"][-1] if self.conv["messages"] else None
        if last and last["type"] == "gemini" and not last.get("tokens"):
            last = dict(last, tokens=tokens)
            self.queued_tokens = None
            self._push(last)
            if self.layout == "json":
                self._write()
        else:
            self.queued_tokens = tokens

    def tool_calls(self, model: str, calls: list[dict]) -> None:
        msgs = self.conv["messages"]
        last = msgs[-1] if msgs else None
        if not last or last["type"] != "gemini" or self.queued_thoughts:
            msg = {"id": next(self.ids), "timestamp": self.clock.now(), "type": "gemini", "content": "", "toolCalls": calls,
                   "thoughts": self.queued_thoughts, "model": model}
            self.queued_thoughts = []
            if self.queued_tokens:
                msg["tokens"], self.queued_tokens = self.queued_tokens, None
            self._push(msg)
        else:
            updated = list(last.get("toolCalls") or [])
            for call in calls:
                i = next((k for k, c in enumerate(updated) if c["id"] == call["id"]), None)
                if i is None:
                    updated.append(call)
                else:
                    updated[i] = {**updated[i], **call}
            self._push(dict(last, toolCalls=updated))
        if self.layout == "json":
            self._write()

    def rewind_to(self, message_id: str) -> None:
        msgs = self.conv["messages"]
        i = next(k for k, m in enumerate(msgs) if m["id"] == message_id)
        self.conv["messages"] = msgs[:i]
        if self.layout == "jsonl":
            self._append({"$rewindTo": message_id})
        else:
            self._write(allow_empty=True)

    def summary(self, text: str) -> None:
        if self.layout == "jsonl":
            self._set({"summary": text})
        else:
            self.conv["summary"] = text
            self._write()


def call(clock: Clock, name: str, args: dict, output=None, error=None, display: str = "", status: str = "success", description: str = "") -> dict:
    """A ToolCallRecord as recordCompletedToolCalls makes it (with the registry's extras)."""
    cid = f"{name}_{int(clock.t.timestamp() * 1000)}_0"
    response = {"error": error} if error is not None else {"output": output}
    return {
        "id": cid,
        "name": name,
        "args": args,
        "result": [{"functionResponse": {"id": cid, "name": name, "response": response}}],
        "status": "error" if error is not None else status,
        "timestamp": clock.now(),
        "resultDisplay": display,
        "displayName": {"read_file": "ReadFile", "run_shell_command": "Shell", "list_directory": "ReadFolder"}.get(name, name),
        "description": description,
        "renderOutputAsMarkdown": name != "run_shell_command",
    }


def session(folder: str, layout: str, session_id: str = "5d1e3a90-2b7c-4f0e-9a51-0c3b8f6d2e47", steps: int = 99) -> Recorder:
    """A session as Gemini CLI records one: a typed request, thoughts, two tool calls (one
    failing) with their results, a slash command, an info line, a rewind and a new turn, a
    final answer. `steps` stops after that many turns (a file caught while it grows)."""
    clock = Clock("2026-03-11T21:02:50.000Z")
    r = Recorder(folder, session_id, "9f2c4e1a7b3d5c6e8f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e", layout, clock)
    model = "gemini-2.5-pro"
    turns = []

    def turn(fn):
        turns.append(fn)
        return fn

    @turn
    def _1():
        r.message("user", [{"text": "Why does `make test` fail in src/? Fix it."}])

    @turn
    def _2():
        r.thought("Looking at the failure", "I will run the tests and read the failing module.")
        r.tokens(5140, 38, cached=0, thoughts=120)
        r.message("gemini", "I'll run the tests first.", model=model)
        calls = [call(clock, "run_shell_command", {"command": "make test", "description": "Run the tests"}, output="Command: make test\nExit Code: 2\nOutput: test_util.py:3: ImportError: cannot import name 'slugify'"),
                 call(clock, "read_file", {"file_path": "src/util.py"}, error="File not found: /work/app/src/util.py", display="File not found.")]
        r.tool_calls(model, calls)
        if layout == "jsonl":  # newer versions also record the tool response as a message
            parts = [{"functionResponse": {"id": c["id"], "name": c["name"], "response": c["result"][0]["functionResponse"]["response"]}} for c in calls]
            r.message("user", parts)

    @turn
    def _3():
        r.thought("Finding the module", "The module lives under app/, not src/.")
        r.tokens(5800, 25, cached=4096, thoughts=60)
        calls = [call(clock, "read_file", {"file_path": "app/util.py"}, output="def slug(text):\n    return text.lower().replace(' ', '-')\n", display="")]
        r.tool_calls(model, calls)
        if layout == "jsonl":
            r.message("user", [{"functionResponse": {"id": calls[0]["id"], "name": "read_file", "response": calls[0]["result"][0]["functionResponse"]["response"]}}])

    @turn
    def _4():
        r.tokens(6400, 52, cached=5632)
        r.message("gemini", "The test imports `slugify`, but app/util.py defines `slug`. Shall I rename it?", model=model)

    @turn
    def _5():
        r.message("user", [{"text": "/stats"}])
        r.message("info", "Session stats: 3 requests, 17,340 input tokens.")

    @turn
    def _6():
        wrong = r.message("user", [{"text": "No, rename the test's import instead."}])
        r.tokens(6600, 20, cached=6144)
        r.message("gemini", "Renaming the function in app/util.py now.", model=model)
        r.rewind_to(wrong)  # the user rewinds: that request and the answer are gone

    @turn
    def _7():
        r.message("user", [{"text": "Keep `slug`; change the test to import `slug`."}])
        r.thought("Editing the test", "One import line changes.")
        r.tokens(6700, 30, cached=6144, thoughts=40)
        calls = [call(clock, "replace", {"file_path": "tests/test_util.py", "old_string": "import slugify", "new_string": "import slug"}, output="Successfully modified file: tests/test_util.py (1 replacements).", display="")]
        r.tool_calls(model, calls)
        if layout == "jsonl":
            r.message("user", [{"functionResponse": {"id": calls[0]["id"], "name": "replace", "response": calls[0]["result"][0]["functionResponse"]["response"]}}])
        r.tokens(7000, 18, cached=6656)
        r.message("gemini", "Done: tests/test_util.py now imports `slug`, and `make test` passes.", model=model)

    @turn
    def _8():
        r.summary("Fix the failing import in the tests")

    for fn in turns[:steps]:
        fn()
    return r
