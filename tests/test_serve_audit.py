"""`ctape serve` audit: a damaged or refused session stops only its own pages (SPEC 14),
a bind that fails says what to do, and the Host rule is SPEC 15's (the bound address or
localhost; on a wildcard bind this machine's own addresses and names).

Over real HTTP against a real `ctape serve` process, except the one check that a bug
still gives 500, which needs a fault planted in the server (in-process, real HTTP).
"""

import errno
import json
import http.client
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from ctape import Tape

from conftest import run_cli, snapshot

KNOWN = re.compile(r"<h1>(Internal error|Error)</h1>")


@pytest.fixture
def serve():
    """Start `ctape --dir D serve [args]` in a process; gives (process, port)."""
    procs = []

    def start(tape_dir, *args):
        p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "serve", *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        url = p.stdout.readline().strip()
        m = re.fullmatch(r"http://(?:\[[^\]]+\]|[^:/]+):(\d+)/", url)
        assert m, (url, p.stderr.read() if p.poll() is not None else "")
        return p, int(m.group(1))

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def get(port, path, host=None, addr="127.0.0.1", timeout=30):
    c = http.client.HTTPConnection(addr, port, timeout=timeout)
    c.request("GET", path, headers={"Host": host if host is not None else f"127.0.0.1:{port}"})
    r = c.getresponse()
    body = r.read().decode("utf-8", "replace")
    c.close()
    return r.status, body


def flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 1
    path.write_bytes(bytes(data))


# -- 1. one damaged or refused session stops only its own pages --------------------------------


@pytest.fixture
def symlinked(tmp_path, tape_dir):
    """A tape whose session b is a symlink to a session of another tape (refused, UnsafePath)."""
    t = Tape.open(tape_dir)
    t.session("a").append("user", {"content": "hello from a"})
    t.close()
    other = tmp_path / "other"
    o = Tape.init(other)
    o.session("b").append("user", {"content": "x"})
    o.close()
    (tape_dir / "sessions" / "b").symlink_to(other / "sessions" / "b")
    return tape_dir


def test_stats_of_a_tape_with_a_refused_session_shows_the_others_and_marks_it(symlinked, serve):
    before = snapshot(symlinked)
    _, port = serve(symlinked)
    status, body = get(port, "/stats")
    assert status == 200, body[-800:]
    assert '<a href="/s/a">a</a></td><td class="num">1</td><td>user 1</td>' in body
    row = re.search(r'<tr class="damaged"><td><a href="/s/b">b</a>.*?</tr>', body)
    assert row and "refusing symlink" in row.group(0) and "damaged" in row.group(0)
    assert status == 200 and get(port, "/")[0] == 200 and get(port, "/s/a")[0] == 200
    assert snapshot(symlinked) == before


@pytest.mark.parametrize("path", ["/s/b", "/s/b/head", "/s/b/tree", "/s/b/after?after=", "/diff?a=a&b=b", "/diff?s=b&a=main&b=main", "/e/abcd?s=b"])
def test_pages_of_a_refused_session_answer_409_with_the_reason(symlinked, serve, path):
    _, port = serve(symlinked)
    status, body = get(port, path)
    assert status == 409, (path, status, body[-800:])
    assert not KNOWN.search(body)
    reason = re.search(r'<h1>Cannot show this</h1><p class="err">([^<\n]*)</p>', body)
    assert reason and "refusing symlink inside the tape directory" in reason.group(1) and "replace it" in reason.group(1)
    assert '<a href="/">all sessions</a>' in body
    # and the server goes on serving the other sessions
    assert get(port, "/s/a")[0] == 200


@pytest.fixture
def damaged(tape_dir):
    """Sessions dmg1 (its newest records bit-flipped, after this machine's index cache saw
    them: the server's cache is the writer's) and dmg2; the hash of dmg1's damaged head."""
    t = Tape.open(tape_dir)
    for s in ("dmg1", "dmg2"):
        for i in range(3):
            t.session(s).append("user", {"content": f"{s} message {i}"})
    head = t.session("dmg1").head.hash
    t.close()
    flip(next((tape_dir / "sessions" / "dmg1").glob("*.seg")), -30)
    return tape_dir, head


def test_diff_with_a_damaged_session_is_not_500(damaged, serve):
    tape_dir, _ = damaged
    _, port = serve(tape_dir)
    status, body = get(port, "/diff?a=dmg1&b=dmg2")  # the first request: HEAD's record is damaged
    assert status in (200, 409), (status, body[-800:])
    assert not KNOWN.search(body)
    if status == 409:
        assert "damaged records in sessions/dmg1/" in body and "ctape fsck" in body
        assert '<a href="/diff">the diff form</a>' in body
    status, body = get(port, "/s/dmg1")
    assert status == 200 and "showing what is readable" in body
    for path in ("/stats", "/", "/s/dmg2", "/diff?a=dmg2&b=dmg2"):
        assert get(port, path)[0] == 200, path


def test_a_damaged_entry_page_is_409_not_500(damaged, serve):
    tape_dir, head = damaged
    _, port = serve(tape_dir)
    for path in (f"/e/{head}?s=dmg1", f"/e/{head}/json", f"/e/{head}/text"):
        status, body = get(port, path)
        assert status in (404, 409), (path, status, body[-800:])
        assert not KNOWN.search(body) and "Traceback" not in body


def test_a_bug_is_still_500(tape_dir, monkeypatch):
    """Known conditions are 404/409; anything else is a bug and stays 500 (in-process: the
    fault is planted in the server)."""
    from ctape.web import make_server
    from ctape.web.pages import Site

    t = Tape.open(tape_dir)
    t.session("a").append("user", {"content": "hi"})
    monkeypatch.setattr(Site, "stats_page", lambda self: 1 / 0)
    httpd = make_server(t, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        port = httpd.server_address[1]
        status, body = get(port, "/stats")
        assert status == 500 and "ZeroDivisionError" in body
        assert get(port, "/s/a")[0] == 200
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.close()


# -- 2. a bind that fails says what to do --------------------------------------------------------


def _serve_fails(tape_dir, *args):
    p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "serve", *args], capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.stdout == "" and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "check the path" not in p.stderr and "permissions" not in p.stderr
    return p.returncode, lines[0]


def test_an_unknown_host_name_says_to_use_an_address_of_this_machine(tape_dir):
    code, line = _serve_fails(tape_dir, "--host", "nonexistent.invalid", "--port", "8123")
    assert code == 2
    assert line.startswith("ctape: error: cannot listen on nonexistent.invalid:8123: name not")
    assert "use an address of this machine, e.g. 127.0.0.1" in line


def test_an_address_of_another_machine_is_refused_with_what_to_use(tape_dir):
    code, line = _serve_fails(tape_dir, "--host", "203.0.113.7")  # TEST-NET-3: on no machine
    assert code == 2
    assert "cannot listen on 203.0.113.7: 203.0.113.7 is not an address of this machine" in line and "127.0.0.1" in line


def test_a_port_in_use_says_to_pick_another(tape_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, line = _serve_fails(tape_dir, "--port", str(port))
        p = subprocess.run([sys.executable, "-m", "ctape.web", "--dir", str(tape_dir), "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert code == 1
    assert line == f"ctape: error: cannot listen on 127.0.0.1:{port}: port {port} is in use; pick another with --port, or --port 0 for any free one"
    assert p.returncode == 1 and p.stderr.strip() == line


# -- 3. the Host rule: the bound address or localhost (SPEC 15) ----------------------------------


def _own_address():
    """A non-loopback IPv4 address of this machine (None when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route's source
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") or ip == "0.0.0.0" else ip


def test_loopback_bind_answers_only_its_own_names(tape_dir, serve):
    _, port = serve(tape_dir)
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", f"LocalHost.:{port}"):
        assert get(port, "/", host=host)[0] == 200, host
    own = _own_address() or "192.0.2.2"
    for host in (f"10.0.0.5:{port}", f"{own}:{port}", f"[fd00::5]:{port}", f"{socket.gethostname()}:{port}",
                 f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1", f"127.0.0.1:{port}x", f"::1:{port}"):
        status, body = get(port, "/", host=host)
        assert status == 403, host
        assert "Sessions" not in body


def test_wildcard_bind_answers_this_machines_addresses_and_names(tape_dir, serve):
    t = Tape.open(tape_dir)
    t.session("a").append("user", {"content": "lan"})
    t.close()
    _, port = serve(tape_dir, "--host", "0.0.0.0")
    hostname = socket.gethostname()
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"{hostname}:{port}", f"{hostname.split('.')[0]}.local:{port}", f"0.0.0.0:{port}"):
        assert get(port, "/", host=host)[0] == 200, host
    for host in (f"10.0.0.5:{port}", f"[fd00::5]:{port}", f"evil.example:{port}", f"{hostname}.evil.example:{port}", f"localhost:{port + 1}"):
        assert get(port, "/", host=host)[0] == 403, host
    own = _own_address()
    if own is None:
        pytest.skip("this machine has no non-loopback IPv4 address to reach the server by")
    # another machine on the network: the URL names this machine's address
    status, body = get(port, "/s/a", host=f"{own}:{port}", addr=own)
    assert status == 200 and "lan" in body
    assert get(port, "/", host=f"10.0.0.5:{port}", addr=own)[0] == 403


def test_a_named_address_bind_answers_that_address_not_others(tape_dir, serve):
    own = _own_address()
    if own is None:
        pytest.skip("this machine has no non-loopback IPv4 address to bind")
    _, port = serve(tape_dir, "--host", own)
    assert get(port, "/", host=f"{own}:{port}", addr=own)[0] == 200
    assert get(port, "/", host=f"localhost:{port}", addr=own)[0] == 200
    for host in (f"10.0.0.5:{port}", f"127.0.0.1:{port}", f"evil.example:{port}"):
        assert get(port, "/", host=host, addr=own)[0] == 403, host


def test_bind_error_codes_are_the_ones_mapped():
    """The messages of a failed bind, for the errors a test cannot provoke on every machine."""
    from ctape.web.server import cannot_listen

    e = cannot_listen("127.0.0.1", 80, PermissionError(errno.EACCES, "Permission denied"))
    assert e.exit_code == 1 and "port 80 needs privileges" in str(e) and "--port 0" in str(e)
    e = cannot_listen("::1", 8000, OSError(errno.EAFNOSUPPORT, "Address family not supported"))
    assert e.exit_code == 1 and str(e).startswith("cannot listen on [::1]:8000: this machine has no IPv6")


# -- found by an audit (2026-12-05) ------------------------------------------------------------------


def _bounded(fn, seconds: float):
    """fn() in a thread; fails when it has not returned within `seconds` (the work it must
    do is linear and takes milliseconds; quadratic, it took minutes)."""
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("v", fn()), daemon=True)
    th.start()
    th.join(seconds)
    assert not th.is_alive(), f"still running after {seconds} s: time quadratic in the input?"
    return out["v"]


def test_error_text_and_code_highlighting_take_time_linear_in_their_input():
    """A 404 quoting a URL of 21,000 `%20` took 3.2 s in one regular-expression call that
    holds the interpreter, and 4 of them delayed a /favicon.ico by 12 s; a page of entries
    with 8,000 characters of `"\\` in a code block took 23 s the same way. 200,000
    characters now take milliseconds; before, minutes."""
    from ctape.web.highlight import highlight
    from ctape.web.pages import _without_cli_hint

    text = _bounded(lambda: _without_cli_hint("no session '" + " " * 200_000 + "x'; see `ctape sessions`"), 20)
    assert len(text) < 2100 and text.endswith("…")
    assert _without_cli_hint("no entry 'abc'; see `ctape log` and `ctape sessions`") == "no entry 'abc'"
    for lang in ("python", "js", "bash", "json"):
        for chunk in ('"\\', "'\\", "`\\", "/*", "'''", '"""'):
            _bounded(lambda: highlight(chunk * 100_000, lang), 20)
    assert highlight('x = "abc" + "open', "python") == (
        'x = <span class="tok-s">&quot;abc&quot;</span> + <span class="tok-s">&quot;open</span>')


def test_malformed_requests_are_answered_not_crashed(tape_dir, serve):
    """Each of these answered 500 with a traceback on stderr, or closed the connection with
    no answer: a part number `²` or `--1`, a NUL in a search, a port `¹` in the Host header
    (str.isdigit takes them, int() does not); and http.server's own errors had none of the
    security headers."""
    t = Tape.open(tape_dir)
    h = t.session("chat").append("user", {"content": "hello there"}).hash
    t.close()
    p, port = serve(tape_dir)
    for path in (f"/e/{h}/text?part=%C2%B2", f"/e/{h}/text?part=--1", f"/e/{h}/image?part=%C2%B2"):
        assert get(port, path)[0] == 404, path
    status, body = get(port, "/?q=hel%00lo")
    assert status == 200, body
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"GET / HTTP/1.0\r\nHost: localhost:{port}\xb9\r\n\r\n".encode("latin-1"))
        assert s.recv(100).startswith(b"HTTP/1.0 403"), "no answer"
    with socket.create_connection(("127.0.0.1", port)) as s:  # more headers than http.server takes: its own 431
        s.sendall(f"GET / HTTP/1.1\r\nHost: localhost:{port}\r\n".encode() + b"X-A: b\r\n" * 150 + b"\r\n")
        head = s.recv(4000).decode("latin-1")
    assert head.startswith("HTTP/1.0 431") and "Content-Security-Policy: default-src 'none'" in head and "X-Frame-Options: DENY" in head, head
    p.terminate()
    err = p.communicate(timeout=10)[1]
    assert "Traceback" not in err, err


def test_unknown_session_names_keep_nothing_in_memory(tape_dir):
    """/s/NAME/head made a tree for every NAME asked, a session or not, and kept it: 2,000
    requests for made-up names grew the server by 110 MB."""
    from ctape.errors import CtapeError
    from ctape.web.pages import Site

    t = Tape.open(tape_dir)
    t.session("chat").append("user", {"content": "x"})
    site = Site(t)
    with site.reading():
        for i in range(50):
            with pytest.raises(CtapeError):
                site.head_json(f"nope-{i}")
        site.head_json("ch")  # a prefix: kept under the session's own name
    assert list(site.graphs) == ["chat"], list(site.graphs)
    t.close()


def test_an_empty_host_is_refused_not_every_interface(tape_dir):
    """`--host ''` (an unset variable) listened on every interface and printed a loopback URL."""
    p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "serve", "--host", ""], capture_output=True, timeout=60)
    assert p.returncode == 2 and b"0.0.0.0" in p.stderr and p.stdout == b"", p


def test_bidi_controls_and_c1_are_written_out_in_pages():
    from ctape.web.escape import esc

    assert esc("I ran: \u202erm -rf ~\u202c \u2066x\u2069 \x9b31m") == "I ran: \\u202erm -rf ~\\u202c \\u2066x\\u2069 \\x9b31m"


def test_markdown_takes_time_linear_in_a_line_of_backticks():
    """A message that was one run of 8,000 backticks took 7 s to render (the code-span
    pattern `(`+)(.+?)\\1` is cubic on it) holding the interpreter, so every other request
    of `serve` waited (found by an audit). 200,000 characters of each shape now take
    milliseconds; cubic, they took days. Code spans keep CommonMark's rule: a run of n
    backticks up to the next run of exactly n, binding tighter than emphasis and links."""
    from ctape.web.markdown import inline

    # in a child process: a regular expression holds the interpreter, so a thread of this
    # one could not even notice the time passing (the code before hung the test run)
    shapes = '("`" * 200_000, "".join("`" * k + " " for k in range(1, 600)), "`a` " * 50_000, "``x` " * 40_000)'
    try:
        subprocess.run([sys.executable, "-c", f"from ctape.web.markdown import render\nfor t in {shapes}: render(t)"], check=True, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("render still running after 20 s: time more than linear in the input?")
    assert inline("a `<b>` c") == "a <code>&lt;b&gt;</code> c"
    assert inline("``a ` b`` c") == "<code>a ` b</code> c"
    assert inline("`unclosed and ``x") == "`unclosed and ``x"
    assert inline("**`code` in bold**") == "<strong><code>code</code> in bold</strong>"
    assert inline("see https://a.b/c`x`") == 'see <a href="https://a.b/c" rel="noopener noreferrer nofollow">https://a.b/c</a><code>x</code>'
    assert inline("\ue000 `a` \ue0001\ue000") == "\ue000 <code>a</code> \ue0001\ue000"  # the placeholder's character in the text



@pytest.mark.parametrize("shape", ['"```" + "a" * 3_000_000', '"~~~" + "+" * 3_000_000', '"[" * 3_000_000', '"[a](" * 750_000'])
def test_markdown_takes_time_linear_in_unclosed_fences_and_runs_of_brackets(shape):
    """An unclosed fence with a long info string and a line of `[` (found by an audit: 70 ms
    a message of 8,000 characters, seconds a page, every other request waiting) made the
    fence and link patterns backtrack: quadratic in the line for the fence, 500-2,000 steps
    a character for the links. 3,000,000 characters of each now take well under a second;
    the patterns before took 15 s or more (the fence: hours)."""
    try:
        subprocess.run([sys.executable, "-c", f"from ctape.web.markdown import render\nrender({shape})"], check=True, timeout=5)
    except subprocess.TimeoutExpired:
        pytest.fail(f"render({shape[:12]}...) still running after 5 s: time more than linear in the input?")


def test_links_keep_their_meaning_with_the_linear_patterns():
    from ctape.web.markdown import inline, render

    link = '<a href="https://a.b/c" rel="noopener noreferrer nofollow">'
    assert inline("see [the docs](https://a.b/c) now") == f"see {link}the docs</a> now"
    assert inline("[[x] y](https://a.b/c)") == f"[[x] y]({link}https://a.b/c</a>)"  # nested brackets: text, then an autolink
    assert inline("[a](" * 3) == "[a]([a]([a]("
    assert render("```python  extra words\nx = 1\n```") .startswith('<pre class="code"><code class="lang-python">')
    assert render("```" + "a" * 50) == "<p>```" + "a" * 50 + "</p>"

def test_pages_stay_bounded_with_many_branches_a_huge_tool_name_and_a_huge_cwd(tape_dir, tmp_path, serve):
    """Found by an audit: a 2-entry session with 10,000 branches and 3,000 tags on one
    entry was a page of 7.6 MB (a compare link per branch, a label per branch and tag on
    the entry, one tree node listing every name) and its tree 3 MB; a pending tool call's
    2 MB name was shown whole; an imported `cwd` of 3.2 MB made every sessions page 8 MB.
    Each place lists a bounded number of names, each cut to 200 characters (a path to 4,096)."""
    t = Tape.open(tape_dir)
    s = t.session("many")
    first = s.append("user", {"content": "hello"}).hash
    s.append("tool_call", {"call_id": "c1", "name": "n" * 2_000_000, "arguments": {}})
    with t.batch():
        for i in range(2000):
            s.branch(f"b{i:05d}", first)
        for i in range(600):
            s.tag(f"t{i:04d}", first)
    t.close()
    src = tmp_path / "cc.jsonl"
    src.write_text(json.dumps({"parentUuid": None, "type": "user", "uuid": "u1", "sessionId": "x", "cwd": "/" + "d" * 3_000_000,
                               "timestamp": "2025-07-14T22:59:30.699Z", "message": {"role": "user", "content": "hi"}}) + "\n")
    run_cli("--dir", tape_dir, "import", "claude-code", src, "-s", "cc", check=True)
    _, port = serve(tape_dir)
    for path in ("/", "/s/many", "/s/many/tree", f"/e/{first}?s=many", f"/s/many?at={first}", "/?q=hello"):
        status, body = get(port, path)
        assert status == 200 and len(body) < 200_000, (path, status, len(body))
    status, body = get(port, "/s/many")
    assert "1 pending tool call: " + "n" * 199 + "…" in body
    assert "and 1,950 more" in body  # the compare line: 50 of 2,000 branches
    status, tree = get(port, "/s/many/tree")
    assert "more" in tree and tree.count("b0") < 200


def test_refused_versions_and_request_lines_get_a_status_line_and_the_headers(tape_dir, serve):
    """`GET / HTTP/2.0` and a one-word request line were answered with bare text: http.server
    refuses them before it has read a version, and then writes no status line and no
    header, so not the security headers either (found by an audit)."""
    Tape.open(tape_dir).close()
    p, port = serve(tape_dir)
    for request, status in ((f"GET / HTTP/2.0\r\nHost: 127.0.0.1:{port}\r\n\r\n", 505), ("garbage\r\n\r\n", 400)):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(request.encode())
            head = s.recv(4000).decode("latin-1")
        assert head.startswith(f"HTTP/1.0 {status}") and "Content-Security-Policy: default-src 'none'" in head, head


def test_many_requests_at_once_share_a_bounded_number_of_tapes(tape_dir):
    """Each request that found every open Tape busy opened another, without bound: 40 at
    once took the server to 1.9 GB, 400 ran it out of descriptors (500s with tracebacks;
    found by an audit). At most MAX_TAPES requests read at once; the others wait their turn."""
    from ctape.web.pages import MAX_TAPES, Site

    t = Tape.open(tape_dir)
    t.session("chat").append("user", {"content": "hello"})
    opened, most, lock, go = [0], [0], threading.Lock(), threading.Event()

    class Counted:
        path = t.path

        def close(self):
            with lock:
                opened[0] -= 1

    def opener():
        with lock:
            opened[0] += 1
            most[0] = max(most[0], opened[0])
        return Counted()

    site = Site(t, opener=opener)

    def request():
        with site.reading():
            go.wait(30)

    threads = [threading.Thread(target=request) for _ in range(40)]
    for th in threads:
        th.start()
    time.sleep(0.5)
    assert most[0] <= MAX_TAPES, most  # the given Tape serves one request, MAX_TAPES - 1 more were opened
    go.set()
    for th in threads:
        th.join(30)
    assert not any(th.is_alive() for th in threads)
    site.close()
    t.close()


def test_a_silent_connection_is_closed_and_static_files_need_no_tape(tape_dir, serve, monkeypatch):
    """A connection that sent half a request stayed open for good, a thread and a descriptor
    each (300 of them held 303 threads; found by an audit): it is closed after
    CTAPE_SERVE_IDLE_SECONDS (default 30; 1 here)."""
    Tape.open(tape_dir).close()
    monkeypatch.setenv("CTAPE_SERVE_IDLE_SECONDS", "1")
    p, port = serve(tape_dir)
    silent = socket.create_connection(("127.0.0.1", port))
    silent.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half a request, then nothing
    silent.settimeout(20)
    start = time.monotonic()
    assert silent.recv(100) == b""  # closed by the server, no answer
    assert time.monotonic() - start < 10
    silent.close()
    assert get(port, "/static/app.js")[0] == 200


def test_the_tree_of_a_session_with_thousands_of_branches_is_bounded(tape_dir, serve):
    """A black-box audit: MAX_NODES bounded anchors only, so 2,000 branch tips gave a tree
    of 2,001 nodes (an 834 KB SVG, 44,126 px wide) for a session whose HEAD holds one
    entry. The newest MAX_LANES tips are drawn (HEAD's branch always), and a line says how
    many there are."""
    from ctape.web.tree import MAX_LANES, MAX_NODES

    with Tape.open(tape_dir) as t:
        s = t.session("fan")
        root = s.append("user", {"content": "fan root"}).hash
        with t.batch():
            for i in range(1500):
                s.checkout(root)
                e = s.append("assistant", {"content": f"fan {i}"})
                s.branch(f"f{i:04d}", e.hash)
            s.checkout("main")
    _, port = serve(tape_dir)
    for _ in range(100):  # the tree is read in the background: until the page has it
        status, body = get(port, "/s/fan")
        if "reading the history" not in body:
            break
        time.sleep(0.2)
    assert status == 200
    nodes = body.count('class="node')
    assert 0 < nodes <= MAX_NODES, nodes
    assert len(body) < 250_000, len(body)
    assert f"the {MAX_LANES} newest branch and tag tips are drawn, of 1,501" in body
    assert 'data-labels="main"' in body  # HEAD's branch is always drawn


def test_a_session_page_opened_by_a_prefix_links_with_the_sessions_name(tape_dir, serve):
    """A black-box audit: /s/na served session `nat` (a unique prefix, as `-s` takes), but
    titled it "na" and its compare links (/diff?s=na...) answered 404."""
    run_cli("--dir", tape_dir, "append", "user", "--text", "one", "-s", "nat", check=True)
    run_cli("--dir", tape_dir, "checkout", "-b", "alt", "-s", "nat", check=True)
    run_cli("--dir", tape_dir, "append", "user", "--text", "two", "-s", "nat", check=True)
    _, port = serve(tape_dir)
    status, body = get(port, "/s/na")
    assert status == 200 and "<h1>nat</h1>" in body and 'data-session="nat"' in body
    links = re.findall(r'href="(/diff\?[^"]+)"', body)
    assert links and all("s=nat" in x for x in links)
    for link in links:
        assert get(port, link.replace("&amp;", "&"))[0] == 200


def test_not_found_pages_name_no_command_to_type(tape_dir, serve):
    """docs/serve.md, "Not found": the page names no command to type. A black-box audit
    found two forms of the command-line advice kept ("; `ctape log` shows the entries
    (...)" and "(see `ctape sessions`)")."""
    for name in ("nat", "xss", "swe"):
        run_cli("--dir", tape_dir, "append", "user", "--text", "one", "-s", name, check=True)
    _, port = serve(tape_dir)
    for path in ("/e/abcd1234?s=nat", "/e/abcd1234", "/s/zzz", "/s/nat?at=nope"):
        status, body = get(port, path)
        assert status == 404 and "`ctape" not in body and "ctape log" not in body and "ctape sessions" not in body, (path, body[-600:])


def test_heads_branch_is_named_first_on_an_entry_with_many_labels(tape_dir, serve):
    """A black-box audit: on an entry with 42 branches, HEAD's (`main`) was in "and 41
    more"; it is named first, as `git log --decorate` puts `HEAD -> main` first."""
    run_cli("--dir", tape_dir, "append", "user", "--text", "one", "-s", "m", check=True)
    with Tape.open(tape_dir) as t:
        s = t.session("m")
        for i in range(41):
            s.branch(f"a{i:02d}")
    _, port = serve(tape_dir)
    status, body = get(port, "/s/m")
    assert status == 200
    first = re.search(r'<span class="ref branch">([^<]*)</span>', body)
    assert first and first.group(1) == "main"


def test_the_session_list_reads_every_sessions_refs_once_a_page_not_once_a_row(tape_dir):
    """Each row of `/` asked for the usage figures, which read the refs of every session to
    see whether a HEAD moved: the page was quadratic (300 sessions 38.7 s, 2,000 no answer in
    10 minutes; found by an audit of scale). Counted, not timed: the refs reads of one page
    grow with the sessions, not with their square."""
    from ctape.web.pages import Site

    def reads(n: int) -> int:
        d = tape_dir.parent / f"many{n}"
        with Tape.init(d) as t:
            with t.batch():
                for i in range(n):
                    t.session(f"s{i:04d}").append("user", {"content": f"hello {i}"})
        with Tape.open(d) as t:
            site = Site(t)
            counted = []
            heads = site._heads
            site._heads = lambda *a: counted.append(1) or heads(*a)
            with site.reading():
                site.sessions_page()
                site.sessions_page()
            if site._usage_job is not None:
                site._usage_job.join()
            return len(counted)

    assert reads(40) == reads(10) <= 4


def test_a_session_page_reads_no_other_sessions_refs(tape_dir):
    """Each session page asked whether any session's HEAD had moved, for its usage figures,
    reading the refs of every session of the tape: a page of a 2-entry session took 7-14 s on
    a tape of 20,000 sessions (found by an audit of long-lived servers). That is asked in the
    usage reader's thread now, at most once a USAGE_RECHECK. Counted, not timed."""
    import ctape.web.pages as pages_mod
    from ctape.web.pages import Site

    d = tape_dir.parent / "many"
    with Tape.init(d) as t:
        with t.batch():
            for i in range(30):
                t.session(f"s{i:04d}").append("user", {"content": f"hello {i}"})
    with Tape.open(d) as t:
        site = Site(t)
        on_page, elsewhere = [], []
        heads = site._heads
        me = threading.current_thread()
        site._heads = lambda *a: (on_page if threading.current_thread() is me else elsewhere).append(1) or heads(*a)
        with site.reading():
            for _ in range(20):
                site.session_page("s0007", None, None)
        if site._usage_job is not None:
            site._usage_job.join()
        assert on_page == []
        assert 1 <= len(elsewhere) <= 2  # a reading when the first page came, and at most one more a second later
        pages_mod.USAGE_RECHECK, recheck = 0.0, pages_mod.USAGE_RECHECK
        try:
            t.session("s0003").append("user", {"content": "moved"})
            for _ in range(200):  # the figures follow a HEAD that moved, within a recheck
                with site.reading():
                    site.session_page("s0003", None, None)
                if site._usage is not None and f"'s0003'" in site._usage[0] and t.session("s0003").head.hash in site._usage[0]:
                    break
                time.sleep(0.02)
            else:
                raise AssertionError("the usage figures never saw the HEAD that moved")
        finally:
            pages_mod.USAGE_RECHECK = recheck
