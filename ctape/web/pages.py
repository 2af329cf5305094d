"""The pages of `ctape serve`, rendered on the server from the library's read operations.

Requests run in parallel, each on a Tape of its own: `Site.reading()` lends the request's
thread an open Tape from a small pool (a Tape, with its caches, is used by one thread at a
time; one is opened when all are busy), so a slow page (a long diff, a huge message)
delays no other. What the requests share is guarded where it is kept: per session a
`Graph` (tree.py), extended incrementally by one walker at a time and checked at most
every LIVE_TTL seconds however many pages poll it, and the usage figures.

Every page is bounded in size however large the messages it shows (conversation.py clips
each entry; the rest is a request away, a slice at a time: `entry_text`).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from contextlib import contextmanager
from importlib import resources
from string import Template
from typing import Callable, Optional
from urllib.parse import quote, urlencode

from ..errors import CorruptObject, CtapeError, EntryNotFound, InvalidInput, RefNotFound
from ..history.recovery import error_text
from ..model.models import Entry, human_bytes, plural
from . import queries
from .conversation import MESSAGE_CHARS, MESSAGE_LINES, Renderer, _short, clipped, image_bytes, listed, part_of, some
from .markdown import esc
from .tree import TAG, Graph, svg

PAGE = 100  # entries per page of a conversation; older ones are a link away
LIVE_TTL = 0.25  # seconds a session's refs are trusted before they are read again
USAGE_RECHECK = 1.0  # seconds between two looks (in a thread) at whether a HEAD moved, for the usage figures
PAGE_WALK_BUDGET = 0.05  # of which a session page spends this much (its polls read on)
WALK_BUDGET = 0.15  # seconds a request may spend reading history for the tree (the rest: next polls)
DIFF_SIDE = 200  # entries shown per side of a diff
COMPARE_SHOWN = 50  # branches offered to compare with in a session's header
LABELLED_SENT = 500  # entries whose branch and tag labels a live page is sent (after_json)
IDLE_TAPES = 4  # open Tapes kept for the next requests (more are opened while many run)
MAX_TAPES = 8  # requests reading the tape at once, each on its own Tape; the others wait their turn


# advice for the command line at the end of an error ("; see `ctape sessions` and `ctape log`"):
# a web page gives links instead
_CLI_HINT = re.compile(r"[;,]?\s*\(?(?:see|run|use|try)\s+`ctape[^`]*`(?:\s*(?:and|or)\s+`ctape[^`]*`)*\)?\s*$"
                       r"|[;,]\s*`ctape[^`]*`[^;]*$")  # "; `ctape log` shows the entries (...)"


def _without_cli_hint(text: str, at_most: int = 2000) -> str:
    """The error without its command-line advice, cut to `at_most` characters. The advice
    is at the end: the pattern looks at the last 300 characters only, since on a long run
    of spaces (a URL of 20,000 `%20`, quoted by its 404) it takes time quadratic in the
    text, in one call that holds every other thread of the server."""
    text = text[:at_most] + "…" if len(text) > at_most else text
    return text[:-300] + _CLI_HINT.sub("", text[-300:])


class Page:
    def __init__(self, body: str | bytes, status: int = 200, ctype: str = "text/html; charset=utf-8"):
        self.body = body.encode() if isinstance(body, str) else body
        self.status = status
        self.ctype = ctype
        self.headers: dict[str, str] = {}


def _template() -> Template:
    return Template(resources.files(__package__).joinpath("templates/base.html").read_text(encoding="utf-8"))


def s_url(session: str, **params) -> str:
    q = urlencode({k: v for k, v in params.items() if v})
    return f"/s/{quote(session)}" + (f"?{q}" if q else "")


def e_url(h: str, session: Optional[str] = None) -> str:
    return f"/e/{h}" + (f"?s={quote(session)}" if session else "")


def text_url(h: str, part=None) -> str:
    """Where the whole text of a clipped block of entry h is (conversation.part_of)."""
    return f"/e/{h}/text" + (f"?part={quote(str(part))}" if part is not None else "")


def image_url(h: str, part: int) -> str:
    return f"/e/{h}/image?part={part}"


def slice_params(q: dict) -> tuple[int, Optional[int]]:
    """`from` and `size` of a text request: the characters wanted (size None: to the end)."""
    try:
        start = int(q.get("from", "0") or 0)
        size = int(q["size"]) if q.get("size") else None
    except ValueError:
        raise InvalidInput("from and size are numbers of characters") from None
    if start < 0 or (size is not None and size < 0):
        raise InvalidInput("from and size are numbers of characters")
    return start, size


def highlight(text: str, words: list[str]) -> str:
    """Escaped text with each occurrence of the words marked (matched before escaping)."""
    low = text.lower()
    marks = []
    for w in words:
        i = low.find(w)
        while i >= 0 and w:
            marks.append((i, i + len(w)))
            i = low.find(w, i + len(w))
    out, pos = [], 0
    for a, b in sorted(marks):
        if a < pos:
            continue
        out.append(esc(text[pos:a]) + f"<mark>{esc(text[a:b])}</mark>")
        pos = b
    return "".join(out) + esc(text[pos:])


def _open(path: str):
    from ..tape import Tape

    return Tape.open(path)


class Site:
    def __init__(self, tape, opener: Optional[Callable[[], object]] = None):
        self.path = tape.path
        self._opener = opener or (lambda: _open(self.path))
        self._idle = [tape]  # Tapes no request is using; the caller's is never closed here
        self._given = tape
        self._pool_lock = threading.Lock()
        # 40 requests at once opened 40 Tapes (1.9 GB), 400 ran out of descriptors (found
        # by an audit): at most MAX_TAPES read at once, the others wait for a turn
        self._turns = threading.BoundedSemaphore(MAX_TAPES)
        self._local = threading.local()
        self.graphs: dict[str, Graph] = {}
        self._graphs_lock = threading.Lock()
        self.base = _template()
        self._usage: Optional[tuple[str, dict]] = None  # (heads it was read at, rows by session + TOTAL)
        self._usage_job: Optional[threading.Thread] = None
        self._usage_asked = -USAGE_RECHECK  # (time.monotonic) when a reading last began
        self._usage_lock = threading.Lock()
        self._usage_failed: Optional[str] = None  # why the last reading of usage failed
        self._about: dict[str, dict] = {}  # head -> sessions.summary of the history up to it
        self._about_jobs: dict[str, threading.Thread] = {}
        self._about_lock = threading.Lock()
        self._places: Optional[int] = None  # the tape's redacted places when the above were read
        # the library imports these on first use; a server pays that before it prints its URL
        from ..store import localstate
        from ..history import recovery, sessions, stream  # noqa: F401

    # -- shared state --------------------------------------------------------------------

    @property
    def tape(self):
        """The Tape of the request this thread serves (see reading())."""
        tape = getattr(self._local, "tape", None)
        if tape is None:
            raise RuntimeError("a page is rendered outside Site.reading()")
        return tape

    @contextmanager
    def reading(self):
        """Lend this thread an open Tape for one request: an idle one, or a new one when
        every Tape is busy with another request, once one of MAX_TAPES turns is free. At
        most IDLE_TAPES are kept afterwards."""
        with self._turns:
            with self._pool_lock:
                tape = self._idle.pop() if self._idle else None
            if tape is None:
                tape = self._opener()
            self._local.tape = tape
            try:
                yield tape
            finally:
                self._local.tape = None
                with self._pool_lock:
                    keep = len(self._idle) < IDLE_TAPES or tape is self._given
                    if keep:
                        self._idle.append(tape)
                if not keep:
                    tape.close()

    def close(self) -> None:
        """Close the Tapes this site opened (the one it was given stays open)."""
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for tape in idle:
            if tape is not self._given:
                tape.close()

    def session(self, name: str):
        from ..history.sessions import require

        return self.tape.session(require(self.tape, name))

    def graph(self, name: str, whole: bool = False, budget: float = WALK_BUDGET) -> Graph:
        """The session's tree, brought up to date at most every LIVE_TTL seconds; a long
        history is read a slice per request (`budget` seconds), unless `whole`. When another
        request is reading it already, this one does not wait (unless `whole`)."""
        self._drop_if_redacted()
        sess = self.session(name)  # a name no session has is refused before anything is kept for it
        with self._graphs_lock:
            g = self.graphs.setdefault(sess.name, Graph())
        if time.monotonic() - g.checked >= LIVE_TTL or (whole and not g.complete):
            g.update(self.tape, sess, None if whole else budget, wait=whole)
        return g

    def usage(self, wait: bool = False) -> Optional[dict]:
        """The figures of `ctape usage` (ops.usage, the one code path) by session, plus
        "TOTAL". Read in a thread on a Tape of its own, again whenever a session's HEAD has
        moved; until the first reading is done None (pages show …), later the previous one.
        Whether a HEAD moved is asked in that thread too, at most every USAGE_RECHECK
        seconds: it reads every session's refs, and a page of a 2-entry session took 7-14 s
        on a tape of 20,000 sessions when each page asked (found by an audit). `wait` (the
        stats page, which is about the whole tape anyway): asked now, and the reading
        waited for."""
        if wait:
            heads = repr(self._heads(self.tape))
            with self._usage_lock:
                if self._usage is not None and self._usage[0] == heads:
                    return self._usage[1]
                job = self._start_usage(heads)
            job.join()
            return self._usage[1] if self._usage is not None else None
        with self._usage_lock:
            if time.monotonic() - self._usage_asked >= USAGE_RECHECK:
                self._start_usage(None)
            return self._usage[1] if self._usage is not None else None

    def _start_usage(self, heads: Optional[str]) -> threading.Thread:
        """The reading under way, else a new one (heads None: it asks them first). The
        caller holds _usage_lock."""
        if self._usage_job is None or not self._usage_job.is_alive():
            self._usage_asked = time.monotonic()
            self._usage_job = threading.Thread(target=self._read_usage, args=(heads,), daemon=True)
            self._usage_job.start()
        return self._usage_job

    def about(self, head: str) -> Optional[dict]:
        """{"title", "source"} of the history up to head (history.sessions.summary, which
        reads a history not seen before whole, back to its root, once: seconds for a long
        import). Read in a thread on a Tape of its own; a page waits for it at most
        PAGE_WALK_BUDGET seconds (enough when it was read before), else shows none."""
        self._drop_if_redacted()
        with self._about_lock:
            if head in self._about:
                return self._about[head]
            job = self._about_jobs.get(head)
            if job is None:
                job = self._about_jobs[head] = threading.Thread(target=self._read_about, args=(head,), daemon=True)
                job.start()
        job.join(PAGE_WALK_BUDGET)
        return self._about.get(head)

    def _read_about(self, head: str) -> None:
        from ..history.sessions import summary

        places = None
        try:
            with _open(self.path) as tape:
                places = tape.redacted_places()
                found = summary(tape, head)
        except CtapeError:
            found = {"title": None, "source": None}
        with self._about_lock:
            if len(self._about) >= 1024:
                self._about.clear()
            if places == self._places:  # not read before a redaction that arrived meanwhile
                self._about[head] = found
            self._about_jobs.pop(head, None)

    def _drop_if_redacted(self) -> None:
        """Forget the titles and trees read before a redaction arrived (a title or an
        anchor's name may hold its text): pages show the marker at once, as reads do."""
        places = self.tape.redacted_places()
        if places != self._places:
            with self._about_lock:
                self._about.clear()
            with self._graphs_lock:
                self.graphs.clear()
            self._places = places

    @staticmethod
    def _heads(tape) -> list[tuple[str, Optional[str]]]:
        """Every session's HEAD, from the refs alone (no entry is read: a head can be 100 MB)."""
        from ..history.sessions import live_names

        def read() -> list[tuple[str, Optional[str]]]:
            out = []
            for name in live_names(tape):
                try:
                    out.append((name, tape.session(name).refs().head_hash))
                except CtapeError:
                    out.append((name, None))  # damaged refs: its page says so
            return out

        return tape.store.settled_all(read)

    def _read_usage(self, heads: Optional[str]) -> None:
        from ..ops.usage import total, usage

        try:
            with _open(self.path) as tape:
                if heads is None:
                    heads = repr(self._heads(tape))
                    with self._usage_lock:
                        if self._usage is not None and self._usage[0] == heads:
                            return  # no HEAD moved
                rows = usage(tape, by="session")
        except Exception as e:  # noqa: BLE001 - a thread of its own: nothing else would catch it
            # a damaged tape: the pages show no figures (not "…" for ever) and /stats says why;
            # a bug too (a record field of a type usage did not expect killed this thread at
            # every request, with a traceback, and /stats said "no token usage recorded")
            why = " ".join(str(e).split()) if isinstance(e, CtapeError) else f"internal error: {type(e).__name__}: {e}"
            with self._usage_lock:
                self._usage, self._usage_failed = (heads, {}), why
            if not isinstance(e, CtapeError):
                sys.stderr.write(f"ctape serve: usage cannot be read: {why}; please report it\n")
            return
        figures = {r["session"]: r for r in rows}
        figures["TOTAL"] = total(rows)
        with self._usage_lock:
            self._usage, self._usage_failed = (heads, figures), None

    def layout(self, title: str, main: str, attrs: dict | None = None) -> Page:
        body_attrs = "".join(f' {k}="{esc(v)}"' for k, v in (attrs or {}).items())
        return Page(self.base.substitute(title=esc(title), main=main, body_attrs=body_attrs, tape=esc(self.path)))

    def trouble(self, path: str, q: dict, err: Exception, status: int = 404) -> Page:
        """The page for an error (server.status_of chose the status): 404 "Not found" for
        what names nothing, the error without its advice for the command line (`see ctape
        sessions`); 409 "Cannot show this" for a known condition of the tape (a damaged
        record, a refused symlink), with its whole one-line reason, which says what to do.
        Then links: the session the request named (or the sessions whose names are close
        to it), the diff form for a diff, and the sessions list. Reading the tape for the
        links may fail the same way: the page is made without them then."""
        try:
            links = self._links_from(path, q, same_page_ok=status == 404)
        except CtapeError:
            links = ['<li><a href="/">all sessions</a> (with search)</li>']
        if status == 404:
            main = f'<h1>Not found</h1><p>{esc(_without_cli_hint(str(err)))}</p>'
        else:
            main = f'<h1>Cannot show this</h1><p class="err">{esc(" ".join(str(err).split()))}</p>'
        page = self.layout("not found" if status == 404 else "cannot show this", f'{main}<p>Go to:</p><ul class="go">{"".join(links)}</ul>')
        page.status = status
        return page

    def not_found(self, path: str, q: dict, err: Exception) -> Page:
        return self.trouble(path, q, err, 404)

    def _links_from(self, path: str, q: dict, same_page_ok: bool) -> list[str]:
        from ..history.sessions import live_names, require

        parts = [p for p in path.split("/") if p]
        on_session = len(parts) >= 2 and parts[0] == "s"
        name = parts[1] if on_session else q.get("s")
        links = []
        if name:
            try:
                real = require(self.tape, name)
                if same_page_ok or not on_session:  # a link to the page that failed leads nowhere
                    links.append(f'<li><a href="{esc(s_url(real))}">session {esc(real)}</a>: its newest entries</li>')
            except CtapeError:
                import difflib

                for near in difflib.get_close_matches(name, live_names(self.tape), n=3, cutoff=0.5):
                    links.append(f'<li>did you mean <a href="{esc(s_url(near))}">{esc(near)}</a>?</li>')
        if parts[:1] == ["diff"]:
            links.append('<li><a href="/diff">the diff form</a>: two refs to compare</li>')
        links.append('<li><a href="/">all sessions</a> (with search)</li>')
        return links

    # -- sessions ------------------------------------------------------------------------

    def sessions_page(self, q: str = "") -> Page:
        rows = []
        figures = self.usage()  # once a page: it reads every session's refs (once a row made the page quadratic: audit)
        for s in self._sessions():
            try:
                if "error" in s:
                    raise s["error"]
                rows.append(self._session_row(s, figures))
            except CtapeError as e:  # a damaged session does not hide the others
                rows.append(f'<tr class="session damaged"><td><a href="{esc(s_url(s["session"]))}">{esc(s["session"])}</a></td><td colspan="6" class="err">{esc(e)}</td></tr>')
        table = (
            '<table class="list"><thead><tr><th>session</th><th>last activity (UTC)</th><th>entries</th><th>branches</th>'
            f'<th>HEAD on</th><th>source</th><th>usage (tokens, cost)</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
            if rows else '<p class="muted">This tape has no sessions yet. Try <code>ctape demo</code>.</p>'
        )
        form = (
            '<form class="search" action="/" method="get"><input type="search" name="q" placeholder="search every session" '
            f'value="{esc(q)}" aria-label="search"><button type="submit">search</button></form>'
        )
        found = self._search(q) if q.strip() else ""
        return self.layout("sessions", f"<h1>Sessions</h1>{form}{found}{table}")

    def _sessions(self) -> list[dict]:
        """The sessions as `ctape sessions` lists them (in its order, with title and source),
        or, when a damaged session makes that fail, each session on its own."""
        from ..history.sessions import listing, live_names

        try:
            return listing(self.tape)
        except CtapeError:
            pass

        out = []
        for name in live_names(self.tape):
            try:
                st = self.tape.session(name).refs()
                h = st.head_hash
                e = self.tape.read_entry(h) if h else None
                out.append({"session": name, "head": h, "branch": st.branch, "entries": e.seq if e else 0, "last_time": e.time if e else None, "title": None, "source": None})
            except CtapeError as e:
                out.append({"session": name, "error": e})
        out.sort(key=lambda s: s["session"])
        out.sort(key=lambda s: s.get("last_time") or "", reverse=True)
        return out

    def _session_row(self, s: dict, figures: Optional[dict]) -> str:
        from ..history.sessions import source_text

        name = s["session"]
        sess = self.tape.session(name)
        usage = "…" if figures is None else _usage_text(figures.get(name))  # …: not read yet
        damaged = ' <span class="badge err">damaged</span>' if s.get("damaged") else ""
        title = f'<div class="title">{esc(s["title"])}</div>' if s.get("title") else ""
        src = s.get("source") or {}
        return (
            f'<tr class="session"><td><a href="{esc(s_url(name))}">{esc(name)}</a>{damaged}{title}</td>'
            f'<td>{esc((s["last_time"] or "")[:19].replace("T", " "))}</td><td class="num">{s["entries"]:,}</td>'
            f'<td class="num">{len(sess.branches())}</td><td>{esc(s["branch"] or "(detached)")}</td>'
            f'<td title="{esc(_short(src.get("cwd") or "", 4096))}">{esc(source_text(src) or "ctape")}</td><td>{esc(usage)}</td></tr>'
        )

    def _search(self, q: str) -> str:
        try:
            results, partial = queries.search(self.tape, q)
        except InvalidInput as e:  # a query the search refuses
            return f'<section class="results"><p class="err">{esc(e)}</p></section>'
        words = [w.lower().strip('"') for w in q.split()]
        items = "".join(
            f'<li><a href="{esc(s_url(r["session"], at=r["hash"]) + "#h-" + r["hash"][:16] if r["session"] else e_url(r["hash"]))}">'
            f'{esc(r["session"] or "(no session)")}<span class="kind">{esc(r["kind"])}</span><time>{esc((r["time"] or "")[:19].replace("T", " "))}</time></a>'
            f'<div class="snippet">{highlight(r["snippet"], words)}</div></li>'
            for r in results
        )
        note = '<p class="muted">stopped early: the scan reads at most 50,000 entries</p>' if partial else ""
        return f'<section class="results"><h2>{len(results)} match{"es" if len(results) != 1 else ""} for “{esc(q)}”</h2><ul>{items}</ul>{note}</section>'

    # -- a session --------------------------------------------------------------------------

    def _window(self, tip: Optional[str], before: Optional[str]) -> list[Entry]:
        """At most PAGE entries ending at tip, or ending just before `before`, oldest first."""
        h = tip
        if before:
            h = self.tape.read_entry(before).parent
        out: list[Entry] = []
        while h is not None and len(out) < PAGE:
            try:
                e = self.tape.read_entry(h)
            except (EntryNotFound, CorruptObject):  # not synced yet, or damaged: as far as reads back (the page says which)
                break
            out.append(e)
            h = e.parent
        return out[::-1]

    def _renderer(self, name: str, pending=(), refs: Optional[dict] = None) -> Renderer:
        return Renderer(name, lambda h: e_url(h, name), text_url, pending, image_url, refs)

    def _refs_by_entry(self, name: str) -> dict[str, list[str]]:
        """The session's branch names and tags (`tag:NAME`) by the entry each names."""
        if not name:
            return {}
        st = self.session(name).refs()
        out: dict[str, list[str]] = {}
        # HEAD's branch first, as `git log --decorate` puts it: never lost in "and N more"
        for b, h in sorted(st.branches.items(), key=lambda kv: (kv[0] != st.branch, kv[0])):
            out.setdefault(h, []).append(b)
        for t, h in sorted(st.tags.items()):
            out.setdefault(h, []).append(TAG + t)
        return out

    def conversation(self, name: str, tip: Optional[str], before: Optional[str], at: Optional[str], status: Optional[dict] = None) -> str:
        """A page of the conversation ending at tip; `status` (when following HEAD) marks
        pending calls and an unrecorded partial stream."""
        entries = self._window(tip, before)
        pending = [c.get("hash") for c in status["pending_tool_calls"]] if status else []
        html = self._renderer(name, pending, self._refs_by_entry(name)).entries(entries)
        older = ""
        if entries and entries[0].parent:
            older = f'<a class="older" href="{esc(s_url(name, at=at, before=entries[0].hash))}">older entries ({entries[0].seq - 1:,} before these)</a>'
        newer = f'<a class="newer" href="{esc(s_url(name, at=at))}">newest entries</a>' if before else ""
        tail = ""
        if status and status["interrupted_stream"] and not status["interrupted_stream"].get("recorded"):
            text = status["interrupted_stream"].get("content") or ""
            text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
            shown = esc(text[:MESSAGE_CHARS]) + (f"\n… and {len(text) - MESSAGE_CHARS:,} more characters" if len(text) > MESSAGE_CHARS else "")
            live = status["interrupted_stream"].get("live")  # its writer still runs: the text so far
            badge = '<span class="badge ok">being written</span>' if live else '<span class="badge warn">interrupted stream, not recorded yet</span>'
            tail = f'<div class="msg assistant {"live" if live else "interrupted"}"><div class="meta"><span class="role">assistant</span>{badge}</div><div class="body"><pre class="out">{shown}</pre></div></div>'
        return f'{older}<div id="entries">{html}</div>{tail}{newer}'

    def session_header(self, name: str, st: dict, at: Optional[str], tip: Optional[str]) -> str:
        """The facts above a session's conversation (HEAD, branches, tags, flags, compare
        links), as `ctape status` gives them; the live page fetches it again when the refs
        move (after_json)."""
        sess = self.session(name)
        branches = sess.branches()
        current = st["branch"]
        if st["head"]:
            at_head = f'<span>HEAD: <b>{esc(current or "detached")}</b> <a class="hash" href="{esc(e_url(st["head"], name))}">{esc((st["head"] or "")[:10])}</a></span>'
        elif st.get("incomplete"):  # as `ctape status` says it: HEAD unknown here, not unborn
            at_head = '<span class="badge warn">HEAD\'s record has not arrived yet, though branches have (a sync under way?)</span>'
        else:
            at_head = "<span>no entries yet</span>"
        facts = [
            at_head,
            *([f'<span>{st["seq"]:,} {plural(st["seq"], "entry", "entries")} on HEAD</span>'] if st["head"] or not st.get("incomplete") else []),
            f"<span>{len(branches)} branch{'es' if len(branches) != 1 else ''}</span>",
        ]
        tags = sorted(sess.refs().tags.items())
        if tags:
            facts.append(f"<span>{len(tags)} tag{'s' if len(tags) != 1 else ''}</span>")
        try:
            head = self.tape.read_entry(st["head"]) if st["head"] and self.tape.has_entry(st["head"]) else None
        except CorruptObject:
            head = None
        from ..history.sessions import source_text

        about = (self.about(st["head"]) if head is not None else None) or {"title": None, "source": None}
        figures = self.usage()
        spent = "…" if figures is None else _usage_text(figures.get(name))
        if spent:
            facts.append(f'<span class="usage">usage: {esc(spent)}</span>')
        facts.append(f"<span>source: {esc(source_text(about['source']) or queries.source(head))}</span>")
        if about["title"]:
            facts.insert(0, f'<span class="title">{esc(about["title"])}</span>')
        flags = []
        damaged = sess.damage()
        if damaged:  # as the CLI warns: what reads back is shown
            flags.append(f'<span class="badge err">damaged records in {esc(damaged[0])}: showing what is readable; '
                         "run <code>ctape fsck --salvage</code> to keep it and write again</span>")
        if st["pending_tool_calls"]:
            flags.append(f'<span class="badge warn">{len(st["pending_tool_calls"])} pending tool {plural(len(st["pending_tool_calls"]), "call", "calls")}: '
                         f'{esc(listed([_short(c["name"]) for c in st["pending_tool_calls"]]))}</span>')
        if st["interrupted_stream"]:
            live = st["interrupted_stream"].get("live")
            flags.append('<span class="badge ok">a stream is being written</span>' if live else '<span class="badge warn">interrupted stream</span>')
        if st["last_error"]:
            flags.append(f'<a class="badge err" href="{esc(e_url(st["last_error"]["hash"], name))}">last error: {esc(error_text(st["last_error"]["message"])[:80])}</a>')
        if st["conflicts"]:
            flags.append(f'<span class="badge warn">conflict branches: {esc(listed(st["conflicts"]))}</span>')
        others, more = some([b["name"] for b in branches if b["name"] != current], COMPARE_SHOWN)
        compare = " ".join(  # (spaces: a long line of links wraps)
            f'<a href="/diff?{esc(urlencode({"s": name, "a": current or st["head"] or "", "b": b}))}">{esc(b)}</a>' for b in others
        ) + (f' <span class="muted">and {more:,} more (the diff form takes any)</span>' if more else "")
        viewing = f'<p class="viewing">viewing the path to <a class="hash" href="{esc(e_url(tip, name))}">{esc(tip[:10])}</a> · <a href="{esc(s_url(name))}">follow HEAD</a></p>' if at and tip else ""
        header = (
            f'<h1>{esc(name)}</h1><p class="facts">{" · ".join(facts)}</p>'
            + (f'<p class="flags">{" ".join(flags)}</p>' if flags else "")
            + (f'<p class="compare">compare {esc(current or "HEAD")} with: {compare}</p>' if compare else "")
            + (f'<p class="tags">tags: {_tag_links(name, tags)}</p>' if tags else "")
            + viewing
        )
        return header

    def session_page(self, name: str, at: Optional[str], before: Optional[str]) -> Page:
        sess = self.session(name)
        name = sess.name  # a unique prefix names the session, as `-s` takes one: links use its name
        follow = not at
        tip = self.tape.resolve(at, name) if at else sess.refs().head_hash
        if before:
            before = self.tape.resolve(before, name)  # a ref, checked, like `at`
        st = sess.status()
        header = self.session_header(name, st, at, tip)
        conv = self.conversation(name, tip, before, at, st if follow and not before else None)
        # after the conversation: the entries it read are cached, so the tree's walk starts fast
        g = self.graph(name, budget=PAGE_WALK_BUDGET)
        tree = self.tree_html(name, tip, g)
        main = f'<div id="session-header">{header}</div><div class="split"><section id="conversation" class="conversation">{conv}</section><aside id="tree" class="tree-pane"><h2>Branches</h2><div id="tree-svg">{tree}</div></aside></div>'
        attrs = {"data-session": name, "data-head": tip or "", "data-sig": g.sig, "data-follow": "1" if follow and not before else "0", "data-at": at or ""}
        return self.layout(name, main, attrs)

    def tree_html(self, name: str, viewing: Optional[str], g: Optional[Graph] = None) -> str:
        return svg(g or self.graph(name), name, viewing, lambda h: s_url(name, at=h))

    def tree_page(self, name: str, at: Optional[str]) -> Page:
        sess = self.session(name)
        tip = self.tape.resolve(at, name) if at else sess.refs().head_hash
        return Page(self.tree_html(name, tip))

    def head_json(self, name: str) -> Page:
        g = self.graph(name)
        head = self.session(name).refs().head_hash
        return Page(json.dumps({"head": head, "sig": g.sig}), ctype="application/json")

    def _near_head(self, head: Optional[str], refs: dict) -> list[str]:
        """The labelled entries a live page may show: those on the 2 x PAGE entries up to
        HEAD first (the page follows HEAD), then the others, LABELLED_SENT at most."""
        near: list[str] = []
        h, n = head, 0
        while h is not None and n < 2 * PAGE and self.tape.has_entry(h):
            if h in refs:
                near.append(h)
            h, n = self.tape.read_entry(h).parent, n + 1
        seen = set(near)
        rest = [x for x in refs if x not in seen]
        return (near + rest)[:LABELLED_SENT]

    def after_json(self, name: str, after: str) -> Page:
        """Entries appended after `after` on the way to HEAD, as HTML (or the whole newest page)."""
        sess = self.session(name)
        self.graph(name)
        head = sess.refs().head_hash
        st = sess.status()
        refs = self._refs_by_entry(name)
        renderer = self._renderer(name, [c.get("hash") for c in st["pending_tool_calls"]], refs)
        # the header and the branch and tag labels as a reload would show them: refs move
        # without an append too (checkout, branch, tag), and an append moves its branch's
        # label off the entry before it (a black-box audit found the live page keeping
        # the old HEAD in its header and a branch named on two entries)
        labelled = self._near_head(head, refs)
        fresh = {"head": head, "header": self.session_header(name, st, None, head),
                 "decorations": {h: renderer.decorations(h) for h in labelled}}
        if head == after:
            return Page(json.dumps({**fresh, "html": "", "reset": False}), ctype="application/json")
        new: list[Entry] = []
        h = head
        while h is not None and h != after and len(new) < PAGE:
            e = self.tape.read_entry(h)
            new.append(e)
            h = e.parent
        if h == after and after:
            html = renderer.entries(new[::-1])
            reset = False
        else:
            html = self.conversation(name, head, None, None, st)
            reset = True
        return Page(json.dumps({**fresh, "html": html, "reset": reset}), ctype="application/json")

    # -- entry, diff, stats ------------------------------------------------------------------

    def entry_page(self, ref: str, session: Optional[str]) -> Page:
        if session is not None:
            self.session(session)
        e = self.tape.get(ref, session)
        r = self._renderer(session or "", refs=self._refs_by_entry(session or ""))
        parent = f'<a class="hash" href="{esc(e_url(e.parent, session))}">{e.parent}</a>' if e.parent else "(root)"
        rows = [("hash", e.hash), ("seq", str(e.seq)), ("kind", e.kind), ("time", e.time)]
        table = "".join(f"<tr><th>{k}</th><td>{esc(v)}</td></tr>" for k, v in rows) + f"<tr><th>parent</th><td>{parent}</td></tr>"
        call = self._answered_call(e) if e.kind in ("tool_result", "error") and e.call_id else None
        if call is not None:
            table += f'<tr><th>answers</th><td><a class="hash" href="{esc(e_url(call, session))}">{call}</a> (the tool call)</td></tr>'
        conv = f'<p><a href="{esc(s_url(session, at=e.hash))}#h-{e.hash[:16]}">the conversation up to this entry</a></p>' if session else ""
        raw = clipped(json.dumps(e.to_json(), ensure_ascii=False, indent=2), f"/e/{e.hash}/json")
        main = f'<h1>Entry <span class="hash">{e.hash[:12]}</span></h1>{conv}<table class="kv">{table}</table><h2>As shown</h2><div class="conversation">{r.entries([e])}</div><h2>Raw JSON</h2>{raw}'
        return self.layout(f"entry {e.hash[:12]}", main)

    def _answered_call(self, result: Entry) -> Optional[str]:
        """The call a result answers: the newest call with its id still pending at its
        parent, as `status` closes it (history/derived.py); None when none is, or the path
        cannot be read (damage: the page shows the rest without the link)."""
        try:
            pending = self.tape.derived(result.parent)["pending"] if result.parent else []
        except CtapeError:
            return None
        return next((c["hash"] for c in reversed(pending) if c["call_id"] == result.call_id), None)

    def entry_text(self, ref: str, raw: bool, q: dict) -> Page:
        """The whole text of a clipped block (`part`, see conversation.part_of), or the
        entry's JSON; `from` and `size` (characters) ask for a slice of it: the page's "show
        more" fetches CHUNK characters at a time. Headers say where the slice ends and the
        length of the whole."""
        e = self.tape.get(ref)
        if raw:
            value = e.to_json()
        else:
            part = q.get("part")
            value = part_of(e, int(part) if part and re.fullmatch(r"-?[0-9]{1,9}", part) else part)  # (int() refuses 4,301 digits)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
        start, size = slice_params(q)
        end = len(text) if size is None else min(len(text), start + size)
        page = Page(text[start:end] if (start, end) != (0, len(text)) else text, ctype="text/plain; charset=utf-8")
        page.headers = {"X-Ctape-Total": str(len(text)), "X-Ctape-End": str(max(start, end))}
        return page

    def entry_image(self, ref: str, q: dict) -> Page:
        """An image part too large to inline in the page, served on its own."""
        e = self.tape.get(ref)
        part = q.get("part", "")
        got = image_bytes(part_of(e, int(part))) if re.fullmatch(r"[0-9]{1,9}", part) else None
        if got is None:
            raise EntryNotFound(f"entry {e.hash[:12]} has no image part {part!r}")
        return Page(got[1], ctype=got[0])

    def diff_page(self, a: str, b: str, session: Optional[str]) -> Page:
        form = (
            '<form class="diff-form" action="/diff" method="get">'
            f'<input name="a" value="{esc(a)}" placeholder="REF (e.g. demo/main)" aria-label="left ref"> '
            f'<input name="b" value="{esc(b)}" placeholder="REF (e.g. demo/retry)" aria-label="right ref"> '
            f'<input name="s" value="{esc(session or "")}" placeholder="session (for bare branch names)" aria-label="session"> '
            '<button type="submit">compare</button></form>'
        )
        if not (a and b):
            return self.layout("diff", f"<h1>Diff</h1>{form}<p class='muted'>Two refs: SESSION/BRANCH, a hash or prefix, SESSION~N...</p>")
        from ..ops.diff import diff

        # the library's `ctape diff`, reading only the newest DIFF_SIDE entries of each side
        d = diff(self.tape, a, b, session, limit=DIFF_SIDE, newest=True)
        base, left, right = d.base, d.left, d.right
        # the calls still waiting at either side's tip are marked pending there, as a
        # session's page marks those waiting at HEAD
        pending = [c.get("hash") for ref in (a, b) if (tip := self.tape.resolve(ref, session)) for c in self.tape.derived(tip)["pending"]]
        r = self._renderer(session or "", pending, refs=self._refs_by_entry(session or ""))
        if base:
            be = self.tape.read_entry(base)
            where = f'<p>They part after entry <a class="hash" href="{esc(e_url(base, session))}">{base[:12]}</a> (seq {be.seq:,}, {esc(be.kind)}).</p>'
        else:
            where = "<p>They share no history.</p>"

        def side(ref: str, hashes: list[str], count: int) -> str:
            cut = f'<p class="muted">{count - len(hashes):,} older entries not shown</p>' if count > len(hashes) else ""
            entries = [self.tape.read_entry(h) for h in hashes]
            body = r.entries(entries) if entries else '<p class="muted">nothing after the base</p>'
            return f'<section class="side"><h2>{esc(ref)} <span class="muted">+{count:,}</span></h2>{cut}<div class="conversation">{body}</div></section>'

        main = f"<h1>Diff</h1>{form}{where}<div class='sides'>{side(a, left, d.left_count)}{side(b, right, d.right_count)}</div>"
        return self.layout("diff", main)

    def stats_page(self) -> Page:
        st = self.tape.stats()
        rows = "".join(f"<tr><th>{esc(_STAT_NAMES.get(k, k.replace('_', ' ')))}</th><td>{esc(_stat_value(k, v))}</td></tr>" for k, v in st.items())
        srows = []
        for s in self.tape.sessions():
            link = f'<a href="{esc(s_url(s["session"]))}">{esc(s["session"])}</a>'
            try:
                t = self.graph(s["session"], whole=True).totals()
            except CtapeError as e:  # a damaged or refused session does not hide the others (SPEC 14)
                srows.append(f'<tr class="damaged"><td>{link} <span class="badge err">damaged</span></td><td colspan="2" class="err">{esc(e)}</td></tr>')
                continue
            kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(t["kinds"].items()))
            damaged = ' <span class="badge err">damaged</span>' if s.get("damaged") else ""
            srows.append(f'<tr><td>{link}{damaged}</td><td class="num">{t["entries"]:,}</td><td>{esc(kinds)}</td></tr>')
        main = (
            f'<h1>Stats</h1><h2>Storage</h2><table class="kv">{rows}</table>'
            '<h2>Sessions</h2><table class="list"><thead><tr><th>session</th><th>entries (all branches)</th>'
            f'<th>kinds</th></tr></thead><tbody>{"".join(srows)}</tbody></table>'
            f"<h2>Usage</h2>{_usage_table(self.usage(wait=True), self._usage_failed)}"
        )
        return self.layout("stats", main)


# `ctape stats`'s keys as the page names them (the others: their words)
_STAT_NAMES = {"logical_bytes": "logical bytes (before dedupe and compression)", "unique_bytes": "unique bytes (after dedupe)",
               "stored_bytes": "stored bytes (on disk)", "dedupe_saving": "saved by dedupe"}


def _stat_value(key: str, v) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if key == "dedupe_saving" and isinstance(v, float):
        return f"{v:.1%}"
    if key.endswith("_bytes") and isinstance(v, int):
        return f"{v:,} ({human_bytes(v)})"
    return f"{v:,}" if isinstance(v, int) else f"{v:.3g}"


def _tag_links(session: str, tags: list[tuple[str, str]], limit: int = 50) -> str:
    """Each tag a link to the conversation up to the entry it names (the first `limit` by name)."""
    links = " ".join(
        f'<a class="ref tag" href="{esc(s_url(session, at=h))}#h-{h[:16]}" title="entry {h}">{esc(name)}</a>'
        for name, h in tags[:limit]
    )
    return links + (f' <span class="muted">and {len(tags) - limit:,} more (<code>tag:NAME</code> works in any ref)</span>' if len(tags) > limit else "")


# -- usage: the rows of ops.usage, as `ctape usage` prints them ----------------------------------


def _usage_text(row: Optional[dict]) -> str:
    """One session's figures in a few words ("" when it recorded none)."""
    from ..ops.usage import cost_text

    if not row:
        return ""
    cache = f" / {row['cached']:,} cached" if row["cached"] or row["cache_write"] else ""
    cost = cost_text(row)
    return f"{row['input']:,} in / {row['output']:,} out{cache}" + ("" if cost == "-" else f" · {cost}")


def _usage_table(figures: Optional[dict], failed: Optional[str] = None) -> str:
    """`ctape usage` as a table: a row per session, then TOTAL (or why it cannot be read)."""
    from ..ops.usage import cost_text

    if failed:
        return f'<p class="err">usage cannot be read: {esc(failed)}</p>'
    rows = [r for k, r in (figures or {}).items() if k != "TOTAL"]
    if not rows:
        return '<p class="muted">no token usage recorded</p>'
    body = "".join(
        f'<tr{" class=total" if r is figures["TOTAL"] else ""}><td>{esc(r["session"])}</td>'
        + "".join(f'<td class="num">{r[f]:,}</td>' for f in ("input", "output", "cached", "cache_write"))
        + f'<td class="num">{esc(cost_text(r))}</td></tr>'
        for r in rows + [figures["TOTAL"]]
    )
    return (
        '<table class="list usage"><thead><tr><th>session</th><th>input</th><th>output</th><th>cached</th>'
        f"<th>cache write</th><th>cost</th></tr></thead><tbody>{body}</tbody></table>"
        '<p class="muted">as <code>ctape usage</code> gives them: cost estimated from list prices; '
        "<code>-</code>: no price for the model, <code>*</code>: none for some of them</p>"
    )
