"""`ctape serve` over plain HTTP: safety rules, escaping, paging, live endpoints, the CLI.

The browser-driven tests are in test_serve_browser.py.
"""

import base64
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from html.parser import HTMLParser

import pytest

from ctape import Tape
from ctape.web import make_server
from ctape.web.markdown import esc, render

from conftest import snapshot

HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
PNG = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                                     "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()


@pytest.fixture
def served(tape_dir):
    """A server on a free port in this process, over a tape the test fills first."""
    started = {}

    def start():
        t = Tape.open(tape_dir)
        httpd = make_server(t, "127.0.0.1", 0)
        started["httpd"], started["tape"] = httpd, t
        th = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        th.start()
        return httpd.server_address[1]

    yield start
    if "httpd" in started:
        started["httpd"].shutdown()
        started["httpd"].server_close()
        started["tape"].close()


def get(port, path, method="GET", host=None, body=None, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Host": host if host is not None else f"127.0.0.1:{port}"}
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data.decode("utf-8", "replace")


class TagCheck(HTMLParser):
    """Every tag of a page: no inline script, no event-handler attribute, no javascript: URL."""

    def __init__(self):
        super().__init__()
        self.bad = []
        self.scripts = []

    def handle_starttag(self, tag, attrs):
        d = dict(attrs)
        if tag == "script":
            self.scripts.append(d.get("src"))
            if not d.get("src"):
                self.bad.append("inline script")
        for k, v in attrs:
            if k.startswith("on"):
                self.bad.append(f"{tag} {k}")
            if k in ("href", "src") and v and v.strip().lower().startswith(("javascript:", "vbscript:")):
                self.bad.append(f"{tag} {k}={v}")
        if tag == "img" and not (d.get("src") or "").startswith("data:image/png"):
            self.bad.append(f"img src={d.get('src')}")

    def handle_data(self, data):
        pass


def check_page(html):
    p = TagCheck()
    p.feed(html)
    assert p.bad == [], p.bad
    assert p.scripts == ["/static/app.js"]


def fill_hostile(tape_dir):
    t = Tape.open(tape_dir)
    s = t.session("evil")
    s.append("system", {"content": HOSTILE})
    s.append("user", {"content": HOSTILE + " [click](javascript:alert(1)) [ok](https://example.org/a?b=1&c=2) \x1b[31mred\x1b[0m"})
    s.append("tool_call", {"call_id": "c1", "name": HOSTILE, "arguments": {"cmd": HOSTILE}})
    s.append("tool_result", {"call_id": "c1", "output": HOSTILE, "is_error": True})
    s.append("assistant", {"content": [{"type": "text", "text": "an image:"},
                                       {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG}},
                                       {"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,PHN2Zz4="}},
                                       {"type": "image_url", "image_url": {"url": "https://tracker.example/x.png"}}]},
             meta={"x": HOSTILE})
    s.append("anchor", {"name": HOSTILE, "summary": HOSTILE})
    s.append("error", {"message": HOSTILE})
    s.checkout("main~2", new_branch="side")
    s.append("user", {"content": "on the side"})
    t.close()


# -- markdown ---------------------------------------------------------------------------------


def test_markdown_escapes_first_and_keeps_the_safe_subset():
    out = render("# Title\n\nsome **bold** and *em* and `<b>code</b>`\n\n- a\n- b [x](https://e.org/?a=1&b=2)\n\n```python\nprint('<script>')\n```\n" + HOSTILE)
    assert "<h3>Title</h3>" in out and "<strong>bold</strong>" in out and "<em>em</em>" in out
    assert "<code>&lt;b&gt;code&lt;/b&gt;</code>" in out
    assert "<ul><li>a</li><li>b <a href=\"https://e.org/?a=1&amp;b=2\"" in out
    assert '<pre class="code"><code class="lang-python">print(<span class="tok-s">&#x27;&lt;script&gt;&#x27;</span>)</code></pre>' in out
    assert "<script" not in out and "<img" not in out and "&lt;img src=x onerror=" in out


def test_code_blocks_are_coloured_and_still_escaped():
    out = render("```python\ndef f():  # <b>\n    return '<script>alert(1)</script>' + 42\n```\n```ts\nconst x = `<img src=x onerror=y>`\n```")
    assert '<span class="tok-k">def</span>' in out and '<span class="tok-k">return</span>' in out
    assert '<span class="tok-c"># &lt;b&gt;</span>' in out and '<span class="tok-n">42</span>' in out
    assert '<span class="tok-s">&#x27;&lt;script&gt;alert(1)&lt;/script&gt;&#x27;</span>' in out
    assert '<span class="tok-k">const</span>' in out and "&lt;img src=x onerror=y&gt;" in out
    check_page("<script src=/static/app.js></script>" + out)
    assert "<span" not in render("```brainfuck\n+[<>]\n```")  # an unknown language stays plain


def test_markdown_refuses_unsafe_link_schemes_and_shows_controls():
    for bad in ("javascript:alert(1)", "JaVaScRiPt:alert(1)", "data:text/html,x", "vbscript:x", "/relative"):
        assert "<a " not in render(f"[x]({bad})"), bad
    assert esc("\x1b[31mred\x07") == "␛[31mred␇"
    assert render('[x](https://a.b/"onmouseover=alert(1))').count("<a ") == 0


# -- safety -------------------------------------------------------------------------------------


def test_foreign_host_is_refused_and_local_names_are_served(tape_dir, served):
    fill_hostile(tape_dir)
    port = served()
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.nip.io:{port}", f"localhost:{port + 1}", ""):
        status, _, body = get(port, "/", host=host)
        assert status == 403, host
        assert "evil" not in body.replace("evil.example", "")  # no tape data in the refusal
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        assert get(port, "/", host=host)[0] == 200, host


def test_only_get_and_head_are_answered(tape_dir, served):
    fill_hostile(tape_dir)
    before = snapshot(tape_dir)
    port = served()
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"):
        status, headers, _ = get(port, "/s/evil", method=method, body=b"x=1")
        assert status == 405, method
        assert headers["Allow"] == "GET, HEAD"
    assert get(port, "/", method="POST", host="evil.example")[0] == 403
    status, headers, body = get(port, "/s/evil", method="HEAD")
    assert status == 200 and body == "" and int(headers["Content-Length"]) > 1000
    assert snapshot(tape_dir) == before


def test_every_page_escapes_stored_text_and_has_no_inline_script(tape_dir, served):
    fill_hostile(tape_dir)
    port = served()
    t = Tape.open(tape_dir)
    h = t.session("evil").head.hash
    t.close()
    pages = ["/", "/?q=onerror", "/s/evil", "/s/evil?at=side", f"/e/{h}?s=evil", "/diff?s=evil&a=main&b=side", "/stats"]
    for path in pages:
        status, headers, body = get(port, path)
        assert status == 200, path
        assert "script-src 'self'" in headers["Content-Security-Policy"] and "unsafe-inline" not in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        check_page(body)
    _, _, body = get(port, "/s/evil")
    assert "&lt;img src=x onerror=" in body and "&lt;script&gt;" in body
    assert "␛[31mred" in body
    assert 'href="https://example.org/a?b=1&amp;c=2"' in body
    assert body.count('<img class="part"') == 1  # the png; not the svg, not the remote one
    # anchor names are free text and reach the SVG tree
    _, _, tree = get(port, "/s/evil/tree")
    check_page("<script src=/static/app.js></script>" + tree)
    assert "&lt;img src=x" in tree and "<img" not in tree


def test_unknown_things_are_404_not_500(tape_dir, served):
    fill_hostile(tape_dir)
    port = served()
    for path in ("/s/nope", "/s/..%2f..%2fetc", "/s/evil?at=nope", "/e/" + "ab" * 32, "/e/zzzz", "/nowhere", "/static/../pages.py", "/static/x.js", "/diff?a=evil&b=nope",
                 "/s/evil?before=zz", "/s/evil?before=" + "a" * 64, "/s/evil/tree?at=zz", "/e/" + "a" * 70):
        status, _, body = get(port, path)
        assert status == 404, (path, status, body[:300])


# -- pages ----------------------------------------------------------------------------------------


def test_sessions_page_lists_sessions_with_counts_and_search(tape_dir, served):
    fill_hostile(tape_dir)
    t = Tape.open(tape_dir)
    t.session("plain").append("user", {"content": "find the needle here"})
    t.close()
    port = served()
    _, _, body = get(port, "/")
    assert ">evil</a>" in body and ">plain</a>" in body
    row = re.search(r"<tr class=\"session\"><td><a href=\"/s/evil\">evil</a>(?:<div class=\"title\">[^<]*</div>)?</td><td>[^<]*</td><td class=\"num\">(\d+)</td><td class=\"num\">(\d+)</td>", body)
    assert row and row.groups() == ("6", "2")  # HEAD is on side: 5 shared entries and its own
    _, _, body = get(port, "/?q=NEEDLE")
    assert "1 match for" in body and "<mark>needle</mark>" in body and "/s/plain?at=" in body


def test_a_long_session_is_paged_and_deep_links_work(tape_dir, served):
    t = Tape.open(tape_dir)
    s = t.session("long")
    hashes = []
    with t.batch():
        for i in range(250):
            hashes.append(s.append("user" if i % 2 else "assistant", {"content": f"message number {i}"}).hash)
    t.close()
    port = served()
    _, _, body = get(port, "/s/long")
    assert body.count('class="msg ') == 100
    assert "message number 249" in body and "message number 150" in body and "message number 149" not in body
    older = re.search(r'<a class="older" href="([^"]+)"', body).group(1).replace("&amp;", "&")
    _, _, body2 = get(port, older)
    assert "message number 149" in body2 and "message number 50" in body2 and "message number 150" not in body2
    _, _, deep = get(port, f"/s/long?at={hashes[10]}")
    assert "message number 10" in deep and "message number 11" not in deep and f'id="h-{hashes[10][:16]}"' in deep


def test_tool_calls_hold_their_results_and_long_output_is_clipped(tape_dir, served):
    t = Tape.open(tape_dir)
    s = t.session("tools")
    long = "\n".join(f"line {i}" for i in range(5000))
    s.append("tool_call", {"call_id": "a", "name": "bash", "arguments": {"cmd": "seq 5000"}})
    res = s.append("tool_result", {"call_id": "a", "output": long})
    s.append("tool_call", {"call_id": "b", "name": "read", "arguments": {}})
    s.append("user", {"content": "hidden bookkeeping"}, meta={"ctape.hidden": True})
    s.append("user", {"content": "more bookkeeping"}, meta={"ctape.hidden": True})
    t.close()
    port = served()
    _, _, body = get(port, "/s/tools")
    call = re.search(r'<details class="msg tool"[^>]*data-call-id="a">(.*?)</details>', body, re.S).group(1)
    assert 'class="result ' in call and "line 59" in call and "line 60\n" not in call
    assert f'data-src="/e/{res.hash}/text"' in call and "show all (" in call
    assert re.search(r'data-call-id="b">.*?badge warn">pending<', body, re.S)
    assert '<details class="hidden-run"><summary>2 hidden entries' in body
    _, headers, full = get(port, f"/e/{res.hash}/text")
    assert full == long and headers["Content-Type"].startswith("text/plain")


def test_tree_shows_every_branch_and_anchor_and_diff_finds_the_fork(tape_dir, served):
    t = Tape.open(tape_dir)
    s = t.session("t")
    s.append("user", {"content": "root"})
    a = s.append("anchor", {"name": "milestone"})
    s.append("assistant", {"content": "main 1"})
    s.append("assistant", {"content": "main 2"})
    s.checkout(a.hash, new_branch="alt")
    s.append("user", {"content": "alt 1"})
    s.checkout("main")
    t.close()
    port = served()
    _, _, tree = get(port, "/s/t/tree")
    assert 'data-labels="main"' in tree and 'data-labels="alt"' in tree and "⚓ milestone" in tree
    assert "+1" in tree  # one entry between the anchor and main's tip is not drawn
    _, _, d = get(port, "/diff?s=t&a=main&b=alt")
    assert f"They part after entry <a class=\"hash\" href=\"/e/{a.hash}?s=t\">{a.hash[:12]}" in d
    assert "main 2" in d and "alt 1" in d and "+2" in d and "+1" in d


def test_live_endpoints_follow_appends(tape_dir, served):
    t = Tape.open(tape_dir)
    s = t.session("live")
    first = s.append("tool_call", {"call_id": "x", "name": "bash", "arguments": {}})
    port = served()
    info = json.loads(get(port, "/s/live/head")[2])
    assert info["head"] == first.hash
    s.append("tool_result", {"call_id": "x", "output": "done!"})
    new = s.append("user", {"content": "a new message"})
    import time

    time.sleep(0.3)  # the refs are trusted for LIVE_TTL seconds
    info2 = json.loads(get(port, "/s/live/head")[2])
    assert info2["head"] == new.hash and info2["sig"] != info["sig"]
    got = json.loads(get(port, f"/s/live/after?after={first.hash}")[2])
    assert not got["reset"] and "a new message" in got["html"] and 'data-call-id="x"' in got["html"] and "orphan" in got["html"]
    got = json.loads(get(port, "/s/live/after?after=" + "0" * 64)[2])
    assert got["reset"] and "a new message" in got["html"]
    t.close()


def test_stats_page(tape_dir, served):
    fill_hostile(tape_dir)
    port = served()
    _, _, body = get(port, "/stats")
    assert "<h2>Storage</h2>" in body and ">evil</a>" in body and "tool_call 1" in body


# -- the command -----------------------------------------------------------------------------------


def test_cli_prints_the_url_first_and_changes_nothing(tape_dir):
    fill_hostile(tape_dir)
    before = snapshot(tape_dir)
    p = subprocess.Popen([sys.executable, "-m", "ctape.web", "--dir", str(tape_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline().strip()
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/", url)
        assert m, url
        port = int(m.group(1))
        for path in ("/", "/s/evil", "/s/evil/head", "/stats"):
            assert get(port, path)[0] == 200
    finally:
        p.terminate()
        p.wait(timeout=10)
    assert snapshot(tape_dir) == before



@pytest.mark.parametrize("host, warned", [("127.0.0.1", False), ("0.0.0.0", True)])
def test_a_bind_beyond_this_machine_is_warned_of(tape_dir, host, warned):
    """`--host 0.0.0.0` said nothing of the network (found by an audit): every session is
    readable by anyone who reaches the port, and there is no password."""
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "serve", "--host", host, "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().startswith("http://")  # the notes on stderr are written right after it
        time.sleep(0.5)
    finally:
        p.terminate()
        _, err = p.communicate(timeout=10)
    assert err.startswith("ctape serve: read-only view"), err
    assert ("warning: listening on 0.0.0.0" in err and "no password" in err) == warned, err

def test_cli_refuses_a_missing_tape_and_a_busy_port(tmp_path, tape_dir):
    p = subprocess.run([sys.executable, "-m", "ctape.web", "--dir", str(tmp_path / "nope")], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "Traceback" not in p.stderr and p.stdout == ""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = subprocess.run([sys.executable, "-m", "ctape.web", "--dir", str(tape_dir), "--port", str(port)], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.skipif(__import__("shutil").which("rsync") is None, reason="rsync is not installed (.ci/run installs it)")
def test_conflict_branch_left_by_a_sync_is_drawn(tmp_path, served, tape_dir):
    other = tmp_path / "B"
    t = Tape.open(tape_dir)
    t.session("chat").append("user", {"content": "start"})
    t.close()
    subprocess.run(["rsync", "-a", f"{tape_dir}/", f"{other}/"], check=True)
    ta, tb = Tape.open(tape_dir), Tape.open(other)
    ta.session("chat").append("assistant", {"content": "from A"})
    tb.session("chat").append("assistant", {"content": "from B"})
    ta.close(), tb.close()
    subprocess.run(["rsync", "-a", f"{other}/", f"{tape_dir}/"], check=True)
    port = served()
    _, _, tree = get(port, "/s/chat/tree")
    conflict = re.search(r'<a class="node ([^"]*)" href="[^"]*" data-hash="[0-9a-f]+" data-labels="(main\.conflict-[^"]+)"', tree)
    assert conflict and "conflict" in conflict.group(1).split()
    _, _, page = get(port, "/s/chat")
    assert "conflict branches: " + conflict.group(2) in page


def test_open_starts_the_browser_with_the_url(tmp_path, tape_dir):
    marker = tmp_path / "opened"
    # webbrowser runs $BROWSER with %s replaced by the URL
    browser = f"{sys.executable} -c \"import sys; open(sys.argv[1], 'w').write(sys.argv[2])\" {marker} %s"
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "serve", "--open"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "BROWSER": browser})
    try:
        url = p.stdout.readline().strip()
        import time

        for _ in range(200):
            if marker.exists() and marker.read_text():
                break
            time.sleep(0.05)
        assert marker.read_text() == url
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_a_damaged_session_does_not_hide_the_others(tape_dir, served):
    t = Tape.open(tape_dir)
    for name in ("good", "bad"):
        for i in range(5):
            t.session(name).append("user", {"content": f"{name} message {i} " + "x" * 200})
    t.close()
    seg = next((tape_dir / "sessions" / "bad").glob("*.seg"))
    data = bytearray(seg.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 64):
        data[i] ^= 0xFF
    seg.write_bytes(bytes(data))
    port = served()
    status, _, body = get(port, "/")
    assert status == 200 and ">good</a>" in body
    assert get(port, "/s/good")[0] == 200
    assert get(port, "/s/bad")[0] in (200, 404, 409)  # answered with its reason, never as a bug (500)
    status, _, body = get(port, "/")
    assert status == 200, body[-600:]  # and the server still serves


def test_a_damaged_session_shows_what_reads_back_with_a_warning(tape_dir, served):
    """As `log` does: the entries after the damage are shown, the page says the session is
    damaged and what to run, and the tree says why it stops (not "a sync under way")."""
    t = Tape.open(tape_dir)
    for i in range(30):
        t.session("bad").append("user", {"content": f"message {i} " + "x" * 200})
    t.close()
    seg = next((tape_dir / "sessions" / "bad").glob("*.seg"))
    data = bytearray(seg.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 8] = b"\xff" * 8
    seg.write_bytes(bytes(data))
    port = served()
    status, _, body = get(port, "/s/bad")
    assert status == 200, body[-600:]
    assert "message 29" in body and "damaged records in sessions/bad/" in body and "ctape fsck --salvage" in body
    assert "damaged records (see" in body and "have not arrived yet" not in body
    status, _, body = get(port, "/")
    assert status == 200 and 'damaged</span>' in body


# -- parallel requests and bounded pages (issue 25) ----------------------------------------------


def _gate(monkeypatch, slow_hash):
    """Make the first read of entry `slow_hash` wait until the test lets it go: a request
    that reads it is in flight, for as long as the test wants, by events, not by time. The
    read itself is the real one."""
    from ctape.history.tape import Tape as HistoryTape

    started, release = threading.Event(), threading.Event()
    real = HistoryTape.read_entry

    def read_entry(self, h):
        if h == slow_hash and not started.is_set():
            started.set()
            release.wait(60)
        return real(self, h)

    monkeypatch.setattr(HistoryTape, "read_entry", read_entry)
    return started, release


@pytest.mark.parametrize("slow", ["/s/slow", "/diff?s=slow&a=main&b=alt", "/e/{h}/text", "/stats"])
def test_a_slow_page_does_not_delay_another(tape_dir, served, monkeypatch, slow):
    """While one request is held inside the tape (a big diff, a huge message), a page of
    another session is answered: requests run in parallel, each on a Tape of its own."""
    t = Tape.open(tape_dir)
    s = t.session("slow")
    s.append("user", {"content": "start"})
    s.checkout("main", new_branch="alt")
    s.append("assistant", {"content": "on alt"})
    s.checkout("main")
    held = s.append("assistant", {"content": "the entry a slow request is reading"})
    t.session("quick").append("user", {"content": "a small page"})
    t.close()
    started, release = _gate(monkeypatch, held.hash)
    port = served()
    order, answers = [], {}

    def fetch(key, path):
        answers[key] = get(port, path)
        order.append(key)

    slow_request = threading.Thread(target=fetch, args=("slow", slow.format(h=held.hash)))
    slow_request.start()
    try:
        assert started.wait(30), "the slow request never read the held entry"
        fetch("quick", "/s/quick")  # with one lock for every route this waits for the release (and times out)
        fetch("sessions", "/")
    finally:
        release.set()
        slow_request.join(30)
    assert order == ["quick", "sessions", "slow"]
    assert answers["quick"][0] == 200 and "a small page" in answers["quick"][2]
    assert answers["sessions"][0] == 200 and answers["slow"][0] == 200


PAGE_BOUND = 200_000  # bytes: docs/serve.md, "Bounded pages"


def test_a_100_mb_message_gives_a_bounded_page_and_the_rest_on_demand(tape_dir, served):
    huge = "# a huge message\n\n" + ("y" * 99 + "\n") * (1 << 20)  # 100 MiB
    big = "".join(f"line {i:07d} " + "b" * 80 + "\n" for i in range(25_000))  # 2.3 MB: several "show more"
    t = Tape.open(tape_dir)
    s = t.session("huge")
    msg = s.append("user", {"content": huge})
    s.append("tool_call", {"call_id": "c", "name": "cat", "arguments": {"path": "big.log", "pad": "z" * 300_000}})
    res = s.append("tool_result", {"call_id": "c", "output": big})
    parts = s.append("assistant", {"content": [{"type": "text", "text": "first part"}, {"type": "text", "text": big}] + [{"type": "text", "text": "p"}] * 5000})
    err = s.append("error", {"message": big, "trace": "t" * 300_000})
    s.checkout("main~3", new_branch="alt")
    s.append("user", {"content": "on alt"})
    s.checkout("main")
    t.close()
    port = served()
    for path in ("/s/huge", f"/e/{msg.hash}?s=huge", "/diff?s=huge&a=main&b=alt"):
        status, _, body = get(port, path, timeout=120)  # reading a 100 MB value takes seconds on a loaded machine
        assert status == 200, path
        assert len(body.encode()) < PAGE_BOUND, (path, len(body))
        check_page(body)
        if path == "/s/huge":
            page = body
    assert "a huge message" in page and "yyyy" in page and "first part" in page
    # message, arguments, output, a text part, the error's message and its fields: each clipped
    assert page.count('class="show-all"') == 6
    assert "5,000 more parts not shown" in page
    assert f'data-src="/e/{msg.hash}/text" data-shown="8000" data-total="{len(huge)}">show more (8,000 of {len(huge):,} chars shown)' in page
    # the rest: a slice at a time, exactly the stored text
    shown = int(re.search(rf'data-src="/e/{res.hash}/text" data-shown="(\d+)"', page).group(1))
    status, headers, chunk = get(port, f"/e/{res.hash}/text?from={shown}&size=500000")
    assert status == 200 and chunk == big[shown : shown + 500_000]
    assert headers["X-Ctape-Total"] == str(len(big)) and headers["X-Ctape-End"] == str(shown + 500_000)
    _, headers, tail = get(port, f"/e/{res.hash}/text?from={len(big) - 10}&size=500000")
    assert tail == big[-10:] and headers["X-Ctape-End"] == str(len(big))
    assert get(port, f"/e/{parts.hash}/text?part=1&from=5&size=20")[2] == big[5:25]
    assert get(port, f"/e/{err.hash}/text?part=message&from=0&size=30")[2] == big[:30]
    assert get(port, f"/e/{parts.hash}/text?part=99999")[0] == 404
    assert get(port, f"/e/{res.hash}/text?from=x")[0] == 404


def test_a_large_image_is_served_on_its_own(tape_dir, served):
    raw = bytes(range(256)) * 2048  # 512 KiB: too large to inline
    t = Tape.open(tape_dir)
    e = t.session("img").append("user", {"content": [{"type": "text", "text": "look"},
                                                      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(raw).decode()}},
                                                      {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG}}]})
    t.close()
    port = served()
    status, _, page = get(port, "/s/img")
    assert status == 200 and len(page) < 50_000
    assert f'src="/e/{e.hash}/image?part=1"' in page and 'src="data:image/png;base64,' + PNG in page
    status, headers, _ = get(port, f"/e/{e.hash}/image?part=1")
    assert status == 200 and headers["Content-Type"] == "image/png" and int(headers["Content-Length"]) == len(raw)
    assert get(port, f"/e/{e.hash}/image?part=0")[0] == 404  # a text part is no image
    # a part of 4,301 digits or more: int() refuses it (sys.int_max_str_digits), which was a 500
    # and a traceback on the server's stderr (found by an audit); so is a Host port of as many
    many = "1" * 4_301
    for path in (f"/e/{e.hash}/image?part={many}", f"/e/{e.hash}/text?part={many}", f"/e/{e.hash}/text?part=-{many}"):
        status, _, body = get(port, path)
        assert status == 404 and len(body) < 5_000, (path[:40], status)
    assert get(port, "/", host=f"127.0.0.1:{many}")[0] == 403


# -- tags, 404 (issue 24, item 9) ------------------------------------------------------------------


def test_tags_show_on_the_page_in_the_conversation_and_in_the_tree(tape_dir, served):
    t = Tape.open(tape_dir)
    s = t.session("t")
    first = s.append("user", {"content": "root"})
    s.append("assistant", {"content": "answer"})
    s.tag("v1", first.hash)
    s.tag("release", "main")
    s.checkout("main~1", new_branch="alt")
    lone = s.append("user", {"content": "alt 1"})
    s.tag("lonely", lone.hash)
    s.checkout("main")
    s.delete_branch("alt")  # the tag keeps an entry no branch reaches
    t.close()
    port = served()
    _, _, page = get(port, "/s/t")
    assert "3 tags" in page
    tags = re.search(r'<p class="tags">(.*?)</p>', page).group(1)
    assert [m for m in re.findall(r'>([^<]+)</a>', tags)] == ["lonely", "release", "v1"]
    assert f'href="/s/t?at={first.hash}#h-{first.hash[:16]}"' in tags
    assert re.search(rf'id="h-{first.hash[:16]}".*?<span class="ref tag">tag: v1</span>', page, re.S)
    assert '<span class="ref branch">main</span><span class="ref tag">tag: release</span>' in page
    _, _, tree = get(port, "/s/t/tree")
    assert re.search(rf'data-hash="{first.hash}" data-labels="" data-tags="v1">', tree)
    assert 'data-labels="main" data-tags="release"' in tree
    assert re.search(rf'data-hash="{lone.hash}" data-labels="" data-tags="lonely">', tree)  # a lane of its own
    assert "tag:v1" in tree and "tag:lonely" in tree


def test_not_found_pages_link_back_instead_of_naming_commands(tape_dir, served):
    fill_hostile(tape_dir)
    port = served()
    cases = {
        "/s/evl": ['href="/s/evil"', 'href="/"'],  # a near name: did you mean
        "/s/evil?at=nope": ['href="/s/evil"', 'href="/"'],
        "/e/" + "ab" * 32 + "?s=evil": ['href="/s/evil"', 'href="/"'],
        "/diff?s=evil&a=main&b=nope": ['href="/diff"', 'href="/s/evil"'],
        "/nowhere": ['href="/"'],
    }
    for path, links in cases.items():
        status, _, body = get(port, path)
        main = body.split("<main>", 1)[1]
        assert status == 404, path
        assert "`ctape" not in main and "ctape sessions" not in main and "ctape log" not in main, (path, main)
        for link in links:
            assert link in main, (path, link, main)
        check_page(body)


def test_a_stream_still_being_written_is_shown_as_such_and_a_dead_ones_as_interrupted(tape_dir, served):
    """(audit, 2026-12-06) A stream whose writer still ran was labelled "interrupted stream,
    not recorded yet", as status labelled it; its writer holds its lock, so it is being
    written. Once its writer has died, the same text is an interrupted stream."""
    from ctape.history.stream import StreamWriter, _let_go

    t = Tape.open(tape_dir)
    s = t.session("chat")
    s.append("user", {"content": "question"})
    w = StreamWriter(s, flush_interval=3600)
    w.__enter__()
    w.write("the answer so far")
    w.flush()
    port = served()
    _, _, page = get(port, "/s/chat")
    assert "the answer so far" in page and "a stream is being written" in page and "being written</span>" in page
    assert "interrupted stream" not in page and "1 entry on HEAD" in page  # (it said "1 entries")
    w._stop.set()  # the writer dies: no end, and the kernel lets go of its lock
    w._thread.join()
    _let_go(s.store, w.id)
    _, _, page = get(port, "/s/chat")
    assert "the answer so far" in page and "interrupted stream, not recorded yet" in page and "being written" not in page
    t.close()


def test_markdown_nests_lists_and_renders_quotes_tables_and_rules_escaped():
    """An audit of the web view: a sub-list came out as a list of its own after its parent's
    list (the sub-items no longer belonged to item 2), and tables and `>` quotes, common in
    agents' answers, showed as raw pipes and `>`. Everything stays escaped first."""
    out = render("2. **Combined**\n   - sub a\n   - sub b\n3. next\n\n- one\n  - nested\n    1. deep\n- back")
    assert out == ('<ol start="2"><li><strong>Combined</strong><ul><li>sub a</li><li>sub b</li></ul></li><li>next</li></ol>\n'
                   "<ul><li>one<ul><li>nested<ol><li>deep</li></ol></li></ul></li><li>back</li></ul>")
    table = render("| a | b | c |\n|:--|--:|:-:|\n| <b>1</b> | `x` | [l](javascript:alert(1)) |\n| x \\| y |")
    assert table == ('<div class="table"><table><thead><tr><th>a</th><th class="al-r">b</th><th class="al-c">c</th></tr></thead>'
                     '<tbody><tr><td>&lt;b&gt;1&lt;/b&gt;</td><td class="al-r"><code>x</code></td><td class="al-c">[l](javascript:alert(1))</td></tr>'
                     '<tr><td>x | y</td><td class="al-r"></td><td class="al-c"></td></tr></tbody></table></div>')
    quote = render("> a *quote* <script>\n> > inner\n> ```py\n> x = 1\n> ```\n\nafter\n\n---\n\nend")
    assert quote.startswith("<blockquote><p>a <em>quote</em> &lt;script&gt;</p>\n<blockquote><p>inner</p></blockquote>\n<pre class=\"code\">")
    assert quote.endswith("</blockquote>\n<p>after</p>\n<hr>\n<p>end</p>")
    assert render("a | b\n|---|---|x") == "<p>a | b<br>|---|---|x</p>"  # no rule under it: text
    deep = render("> " * 50 + "x")  # nested past DEPTH: the rest is text
    assert deep.count("<blockquote>") == 8 and "&gt; &gt;" in deep


@pytest.mark.parametrize("shape", ['"|" * 3_000_000', '"a|b\\n" + "-|" * 1_000_000 + "x"', '"> " * 1_000_000 + "x"',
                                   '"".join(" " * k + "- x\\n" for k in range(3000))', '("1. a\\n  - b\\n" * 100_000)', '"- " * 1_500_000 + "x"'])
def test_markdown_takes_time_linear_in_tables_quotes_and_lists(shape):
    """The new block shapes, at megabytes: a second or two each (linear), in a child process
    (a regular expression holds the interpreter: a runaway one would hang the test run)."""
    try:
        subprocess.run([sys.executable, "-c", f"from ctape.web.markdown import render\nrender({shape})"], check=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"render of {shape} still running after 30 s: time more than linear in the input?")


def test_a_result_s_page_links_the_call_it_answers_and_stats_read_as_words(tape_dir, served):
    """An audit of the web view: a tool result's page linked only its parent, not the call
    it answers (with reused ids, which one?), and /stats showed raw keys (`dedupe_saving
    0.0202`). The answered call is the one pair_results gives the result."""
    t = Tape.open(tape_dir)
    s = t.session("calls")
    s.append("user", {"content": "go"})
    first = s.append("tool_call", {"call_id": "x", "name": "bash", "arguments": {"cmd": "one"}}).hash
    s.append("tool_result", {"call_id": "x", "output": "1"})
    second = s.append("tool_call", {"call_id": "x", "name": "bash", "arguments": {"cmd": "two"}}).hash
    s.append("assistant", {"content": "between"})
    answer = s.append("tool_result", {"call_id": "x", "output": "2"}).hash
    t.close()
    port = served()
    status, _, page = get(port, f"/e/{answer}?s=calls")
    assert status == 200 and f'/e/{second}?s=calls">{second}</a> (the tool call)' in page and first not in page
    status, _, page = get(port, "/stats")
    assert status == 200 and "saved by dedupe" in page and "dedupe_saving" not in page and "logical bytes" in page


def test_the_diff_page_pairs_results_and_marks_calls_pending_at_a_side_s_tip(tape_dir, served):
    """An audit of the web view: on the diff page a tool call had no badge at all (a call
    still waiting at one side's tip looked like a finished one)."""
    t = Tape.open(tape_dir)
    s = t.session("sides")
    base = s.append("user", {"content": "go"}).hash
    s.append("tool_call", {"call_id": "a", "name": "bash", "arguments": {"cmd": "left"}})
    s.append("tool_result", {"call_id": "a", "output": "done left"})
    s.checkout(base, new_branch="right")
    waiting = s.append("tool_call", {"call_id": "b", "name": "bash", "arguments": {"cmd": "right"}}).hash
    t.close()
    port = served()
    status, _, page = get(port, "/diff?a=sides/main&b=sides/right&s=sides")
    assert status == 200 and 'badge ok">done' in page and "done left" in page
    i = page.index(f'data-hash="{waiting}"')
    assert 'badge warn">pending' in page[i: i + 800]
