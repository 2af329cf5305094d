"""`ctape serve` in a real headless Chromium (Debian's chromium + chromium-driver, driven by
Selenium; .ci/run installs them). Skipped, with the reason, only when they are absent.

The screenshots in docs/ come from tests/serve_screenshots.py.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import run_cli

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip("Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver; .ci/run does it)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--window-size=1400,1000"]
HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'


@pytest.fixture(scope="module")
def tape_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("web") / "tape"
    env = {"CTAPE_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    run_cli("--dir", d, "demo", env=env, check=True)
    run_cli("--dir", d, "append", "user", "--text", HOSTILE + " and a hostile **bold**", "-s", "evil", env=env, check=True)
    run_cli("--dir", d, "append", "tool-call", '{"call_id": "c1", "name": "bash", "arguments": {"cmd": "cat evil.html"}}', "-s", "evil", env=env, check=True)
    run_cli("--dir", d, "append", "tool-result", '{"call_id": "c1", "output": ' + __import__("json").dumps(HOSTILE) + "}", "-s", "evil", env=env, check=True)
    return d, env


@pytest.fixture(scope="module")
def server(tape_dir):
    d, env = tape_dir
    p = subprocess.Popen([sys.executable, "-m", "ctape.web", "--dir", str(d)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **env})
    url = p.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url
    yield url.rstrip("/")
    p.terminate()
    p.wait(timeout=10)


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="ctape-chromium-")
    for f in FLAGS + [f"--user-data-dir={profile}"]:
        opts.add_argument(f)
    d = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    d.set_page_load_timeout(30)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def wait_for(browser, cond, timeout=10):
    """Poll `cond` until it holds. An element the page replaced while the condition read it
    (a live page re-renders its entries) is a poll to repeat, not a failure: one CI run
    failed on a StaleElementReferenceException in the middle of such a read."""
    return WebDriverWait(browser, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: cond(d))


def test_sessions_page_lists_sessions(browser, server):
    browser.get(server + "/")
    names = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "tr.session td:first-child a")]
    assert sorted(names) == ["demo", "evil"]


def test_session_page_shows_messages_and_tool_results(browser, server):
    browser.get(server + "/s/demo")
    text = browser.find_element(By.ID, "conversation").text
    assert "The tests fail. Fix add() in calc.py." in text
    assert "The fix is to change the minus sign" in text and "interrupted stream" in text
    call = browser.find_element(By.CSS_SELECTOR, 'details.tool[data-call-id="call_1"]')
    assert "def add(a, b)" not in call.text  # folded
    call.find_element(By.TAG_NAME, "summary").click()
    assert "def add(a, b):" in call.find_element(By.CSS_SELECTOR, ".result").text
    err = browser.find_element(By.CSS_SELECTOR, 'details.tool[data-call-id="call_2"]')
    assert err.find_element(By.CSS_SELECTOR, "summary .badge").text == "error"
    assert "1 pending tool call" in browser.find_element(By.CSS_SELECTOR, ".flags").text


def test_clicking_a_branch_node_shows_that_branch(browser, server):
    browser.get(server + "/s/demo")
    assert "Try again" not in browser.find_element(By.ID, "conversation").text
    node = browser.find_element(By.CSS_SELECTOR, 'svg.tree a.node[data-labels="retry"]')
    node.click()
    wait_for(browser, lambda d: "at=" in d.current_url)
    text = browser.find_element(By.ID, "conversation").text
    assert "Try again, but run the tests with a timeout of 30 s." in text
    assert "The fix is to change the minus sign" not in text  # main's later entries are not on retry's path
    assert browser.find_element(By.CSS_SELECTOR, "svg.tree a.node.viewing").get_attribute("data-labels") == "retry"


def test_hostile_payload_renders_as_text_and_runs_nothing(browser, server):
    browser.get(server + "/s/evil")
    for d in browser.find_elements(By.CSS_SELECTOR, "details"):
        d.find_element(By.TAG_NAME, "summary").click()
    text = browser.find_element(By.ID, "conversation").text
    assert "<img src=x onerror=" in text and '<script>document.title="pwned"</script>' in text
    assert browser.title != "pwned" and browser.execute_script("return document.title") != "pwned"
    assert browser.find_elements(By.CSS_SELECTOR, "#conversation img, #conversation script") == []
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018


def test_an_entry_appended_by_another_process_appears_without_reload(browser, server, tape_dir):
    d, env = tape_dir
    browser.get(server + "/s/demo")
    browser.execute_script("window.ctapeMarker = 42")
    before = len(browser.find_elements(By.CSS_SELECTOR, "#entries > *"))
    run_cli("--dir", d, "append", "tool-result", '{"call_id": "call_4", "output": "patched calc.py"}', "-s", "demo", env=env, check=True)
    run_cli("--dir", d, "append", "assistant", "--text", "Appended *live* by another process.", "-s", "demo", env=env, check=True)
    wait_for(browser, lambda b: "Appended live by another process." in b.find_element(By.ID, "conversation").text, timeout=10)
    assert browser.execute_script("return window.ctapeMarker") == 42  # the same page: no reload
    assert len(browser.find_elements(By.CSS_SELECTOR, "#entries > *")) == before + 1  # the result went into its call
    call = browser.find_element(By.CSS_SELECTOR, 'details.tool[data-call-id="call_4"]')
    assert call.find_element(By.CSS_SELECTOR, "summary .badge").text == "done"
    assert "patched calc.py" in call.get_attribute("textContent")


def test_post_from_the_page_is_refused(browser, server):
    browser.get(server + "/")
    status = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/', {method: 'POST', body: 'x=1'}).then(r => done(r.status), e => done(String(e)));"
    )
    assert status == 405


def test_foreign_host_header_is_refused(server):
    import http.client

    host, port = re.match(r"http://([\d.]+):(\d+)", server).groups()
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("GET", "/s/demo", headers={"Host": f"attacker.example:{port}"})
    r = c.getresponse()
    assert r.status == 403 and b"demo" not in r.read()


def test_show_all_fetches_the_whole_output_and_other_pages(browser, server, tape_dir):
    d, env = tape_dir
    long = "\n".join(f"row {i}" for i in range(400))
    run_cli("--dir", d, "append", "tool-call", '{"call_id": "big", "name": "seq", "arguments": {}}', "-s", "big", env=env, check=True)
    run_cli("--dir", d, "append", "tool-result", "-s", "big", input=__import__("json").dumps({"call_id": "big", "output": long}).encode(), env=env, check=True)
    browser.get(server + "/s/big")
    browser.find_element(By.CSS_SELECTOR, "details.tool summary").click()
    pre = browser.find_element(By.CSS_SELECTOR, ".result pre.out")
    assert "row 399" not in pre.text
    browser.find_element(By.CSS_SELECTOR, "a.show-all").click()
    wait_for(browser, lambda b: "row 399" in pre.text)
    browser.get(server + "/diff?s=demo&a=main&b=retry")
    assert "They part after entry" in browser.find_element(By.TAG_NAME, "main").text
    browser.get(server + "/stats")
    assert "Storage" in browser.find_element(By.TAG_NAME, "main").text


# -- issue 24, item 9 ---------------------------------------------------------------------------


def _python_tape(tape_dir, monkeypatch):
    """The served tape through the Python API, with the tests' index cache."""
    from ctape import Tape

    d, env = tape_dir
    monkeypatch.setenv("CTAPE_CACHE_DIR", env["CTAPE_CACHE_DIR"])
    return Tape.open(d)


def test_a_session_page_opens_at_its_newest_entry(browser, server, tape_dir, monkeypatch):
    t = _python_tape(tape_dir, monkeypatch)
    s = t.session("chatty")
    with t.batch():
        for i in range(60):
            s.append("user" if i % 2 == 0 else "assistant", {"content": f"message {i}\n\n" + "words " * 80})
    t.close()
    browser.get(server + "/s/chatty")
    wait_for(browser, lambda b: b.execute_script("return window.scrollY") > 0)
    newest = browser.find_element(By.CSS_SELECTOR, "#entries > :last-child")
    assert "message 59" in newest.text
    top, bottom, height = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.top, r.bottom, window.innerHeight];", newest)
    assert 0 <= top and bottom <= height  # in view
    # a link to an entry still opens at that entry
    first = browser.find_element(By.CSS_SELECTOR, "#entries > :first-child").get_attribute("id")
    browser.get(server + "/")
    browser.get(server + "/s/chatty#" + first)
    top, bottom, height = browser.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect(); return [r.top, r.bottom, window.innerHeight];", first)
    assert -1 <= top < height and browser.execute_script("return window.scrollY") < 400


OVERLAPS = """
const svg = document.querySelector('svg.tree');
const boxes = [];
svg.querySelectorAll('text').forEach((t) => { const b = t.getBBox(); boxes.push(['text ' + t.textContent, b.x, b.y, b.x + b.width, b.y + b.height]); });
svg.querySelectorAll('circle').forEach((c) => { const b = c.getBBox(); boxes.push(['node', b.x, b.y, b.x + b.width, b.y + b.height]); });
// the vertical part of each edge ("... V y2" ends every path) is a thin box
svg.querySelectorAll('path').forEach((p) => {
  const d = p.getAttribute('d'); const m = d.match(/([\\d.]+) ([\\d.]+) V([\\d.]+)$/) || d.match(/M([\\d.]+) ([\\d.]+) V([\\d.]+)/);
  if (m) boxes.push(['line', +m[1] - 1, Math.min(+m[2], +m[3]), +m[1] + 1, Math.max(+m[2], +m[3])]);
});
const bad = [];
for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
  const a = boxes[i], b = boxes[j];
  if (!a[0].startsWith('text') && !b[0].startsWith('text')) continue;  // lines meet nodes by design
  if (a[1] < b[3] - 0.5 && b[1] < a[3] - 0.5 && a[2] < b[4] - 0.5 && b[2] < a[4] - 0.5) bad.push(a[0] + ' / ' + b[0]);
}
return bad;
"""


def test_tree_labels_never_overlap_with_three_roots(browser, server, tape_dir, monkeypatch):
    """Three unrelated runs in one session (three roots), with long runs between drawn
    nodes (wide "+N" labels on every lane) and a tag: no text of the tree touches another
    text, a node or an edge."""
    t = _python_tape(tape_dir, monkeypatch)
    s = t.session("three")
    heads = []
    with t.batch():
        for run, n in enumerate((1234, 57, 3)):
            prev = None
            for i in range(n):
                prev = s.put_entry("user" if i % 2 == 0 else "assistant", {"content": f"run {run} message {i}"}, parent=prev).hash
            heads.append(prev)
    s.set_refs("import", {"main": heads[0], "run-2": heads[1], "run-3": heads[2], "HEAD": "@main"})
    s.branch("fork", heads[1] + "~20")
    s.tag("v1", heads[0] + "~600")
    t.close()
    browser.get(server + "/s/three")
    wait_for(browser, lambda b: not b.find_elements(By.CSS_SELECTOR, "#tree-svg .loading"), timeout=20)
    labels = [a.get_attribute("data-labels") for a in browser.find_elements(By.CSS_SELECTOR, "svg.tree a.node")]
    assert {"main", "run-2", "run-3", "fork"} <= set(labels) and labels.count("") >= 3  # three roots, a fork point, the tag
    assert browser.find_element(By.CSS_SELECTOR, 'svg.tree a.node[data-tags="v1"]')
    assert browser.execute_script(OVERLAPS) == []
    browser.find_element(By.ID, "tree").screenshot(os.path.join(os.environ.get("CTAPE_SHOTS", tempfile.gettempdir()), "ctape-tree-three-roots.png"))


def test_not_found_page_links_back_to_the_sessions(browser, server):
    browser.get(server + "/s/demoo")  # a near name
    main = browser.find_element(By.TAG_NAME, "main")
    assert "ctape sessions" not in main.text
    main.find_element(By.LINK_TEXT, "demo").click()
    wait_for(browser, lambda b: b.current_url.endswith("/s/demo"))
    browser.get(server + "/nowhere")
    browser.find_element(By.LINK_TEXT, "all sessions").click()
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "tr.session"))


def _slice_came(body, link, shown) -> bool:
    """The link moved on, or went with the last slice (between the two looks, too: a
    removed element is stale)."""
    try:
        return not body.find_elements(By.CSS_SELECTOR, "a.show-all") or link.get_attribute("data-shown") != shown
    except StaleElementReferenceException:
        return True


def test_show_more_fetches_a_huge_message_a_slice_at_a_time(browser, server, tape_dir, monkeypatch):
    text = "".join(f"line {i:06d}\n" for i in range(100_000))  # 1.2 M characters: three slices after the first part
    t = _python_tape(tape_dir, monkeypatch)
    t.session("longmsg").append("user", {"content": "**a long paste**\n" + text})
    t.close()
    browser.get(server + "/s/longmsg")
    body = browser.find_element(By.CSS_SELECTOR, "#entries .msg.user .body")
    assert body.find_element(By.TAG_NAME, "strong").text == "a long paste"  # the first part is markdown
    link = body.find_element(By.CSS_SELECTOR, "a.show-all")
    assert link.text.startswith("show more (")
    first_part = int(link.get_attribute("data-shown"))
    clicks = 0
    while body.find_elements(By.CSS_SELECTOR, "a.show-all"):
        shown = link.get_attribute("data-shown")
        link.click()
        clicks += 1
        wait_for(browser, lambda b: _slice_came(body, link, shown))
    assert clicks == 3
    rest = browser.execute_script("return arguments[0].querySelector('pre.rest').textContent;", body)
    assert rest == ("**a long paste**\n" + text)[first_part:]  # every character once, in order


def test_a_live_page_keeps_its_header_and_labels_as_a_reload_shows_them(browser, server, tape_dir):
    """A black-box audit: on an open page, new entries came but the header kept the old
    HEAD, entry count and branches, a branch was named on its old tip and its new one, and
    a checkout or a tag changed nothing. The header and the labels now follow the tape."""
    d, env = tape_dir

    def cli(*args):
        return run_cli("--dir", d, *args, "-s", "live", env=env, check=True).stdout.decode().strip()

    cli("append", "user", "--text", "live one")
    browser.get(server + "/s/live")
    browser.execute_script("window.ctapeMarker = 7")

    def header():
        return browser.find_element(By.ID, "session-header").text

    def labels(name):  # the entries shown with a branch or tag label of this name
        return [e.get_attribute("data-hash") for e in browser.find_elements(By.CSS_SELECTOR, "#entries [data-hash]")
                if any(r.text == name for r in e.find_elements(By.CSS_SELECTOR, ":scope > .meta .ref"))]

    cli("append", "assistant", "--text", "live two")
    tip = cli("append", "user", "--text", "live three")
    wait_for(browser, lambda b: tip[:10] in header(), timeout=15)
    assert "3 entries on HEAD" in header()
    wait_for(browser, lambda b: labels("main") == [tip], timeout=15)  # on the new tip only
    cli("checkout", "-b", "side", "live~1")
    side = cli("append", "user", "--text", "on side")
    wait_for(browser, lambda b: "HEAD: side" in header() and side[:10] in header(), timeout=15)
    assert "2 branches" in header()
    wait_for(browser, lambda b: labels("side") == [side], timeout=15)
    cli("tag", "t-live")  # moves no HEAD: the refs alone changed
    wait_for(browser, lambda b: labels("tag: t-live") == [side] and "1 tag" in header(), timeout=15)
    assert browser.execute_script("return window.ctapeMarker") == 7  # the same page: no reload


def test_an_open_page_of_a_removed_session_says_so_and_stops_asking(browser, server, tape_dir):
    """A black-box audit: after `ctape session rm`, an open page asked /head every 0.5 s
    for ever (a 404 each time) and said nothing."""
    d, env = tape_dir
    run_cli("--dir", d, "append", "user", "--text", "soon gone", "-s", "gone", env=env, check=True)
    browser.get(server + "/s/gone")
    run_cli("--dir", d, "session", "rm", "gone", env=env, check=True)
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#session-header .gone"), timeout=15)
    assert "soon gone" in browser.find_element(By.ID, "conversation").text  # what it held stays shown
    seen = browser.execute_script("return performance.getEntriesByType('resource').filter(e => e.name.endsWith('/s/gone/head')).length")
    time.sleep(2)
    assert browser.execute_script("return performance.getEntriesByType('resource').filter(e => e.name.endsWith('/s/gone/head')).length") == seen


def test_an_anchor_shows_its_name_as_stored_and_long_words_wrap(browser, server, tape_dir):
    """An anchor named `Fix-PROD-Bug-...` showed as `fix-prod-bug-...` (the label was
    lower-cased by the style sheet), and a name or summary without spaces made the page
    20,574 px wide in a 1,280 px window (found by an audit)."""
    d, env = tape_dir
    name = "Fix-PROD-Bug-" + "M" * 300
    run_cli("--dir", d, "append", "anchor", '{"name": "' + name + '", "summary": "' + "Z" * 3000 + '"}', "-s", "anchors", env=env, check=True)
    browser.get(server + "/s/anchors")
    label = wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, ".msg.anchor .role"))[0]
    assert "Fix-PROD-Bug-MMM" in label.text
    wide, window = browser.execute_script("return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert wide <= window, (wide, window)


def test_reused_call_ids_pair_each_result_with_its_own_call_and_labels_leave_a_call(browser, server, tape_dir):
    """A black-box audit of the web view: agents reuse call ids (SWE-agent's transcripts give
    one id to several calls). Every call with an id showed the first result of that id (a
    check run after a fix showed the output from before it), the real result sat below as a
    loose box, a call still running showed "done"; and after a live append a tool call kept
    its branch label. A result answers the nearest call before it with its id that has none
    yet, on the page as served and as it grows; a call's label follows the branch."""
    d, env = tape_dir

    def cli(*args):
        return run_cli("--dir", d, *args, "-s", "reuse", env=env, check=True).stdout.decode().strip()

    def call(cmd):
        return cli("append", "tool-call", json.dumps({"call_id": "x", "name": "bash", "arguments": {"cmd": cmd}}))

    def result(out):
        return cli("append", "tool-result", json.dumps({"call_id": "x", "output": out}))

    cli("append", "user", "--text", "run things")
    first = call("echo FIRST")
    result("FIRST-OUTPUT")
    second = call("echo SECOND")
    result("SECOND-OUTPUT")
    cli("append", "assistant", "--text", "done")
    third = call("echo THIRD")  # still running
    browser.get(server + "/s/reuse")

    def inside(h):  # (badge, result text) of the call h as the page shows it
        el = browser.find_element(By.CSS_SELECTOR, f'details.tool[data-hash="{h}"]')
        badge = el.find_elements(By.CSS_SELECTOR, ":scope > summary .badge")
        res = el.find_elements(By.CSS_SELECTOR, ":scope > .result")
        return (badge[0].text if badge else ""), (res[0].get_attribute("textContent") if res else None)

    assert "FIRST-OUTPUT" in inside(first)[1] and "SECOND-OUTPUT" in inside(second)[1]
    assert inside(first)[0] == inside(second)[0] == "done"
    assert inside(third) == ("pending", None)
    assert not browser.find_elements(By.CSS_SELECTOR, "#entries .orphan")
    ids = browser.execute_script("return Array.from(document.querySelectorAll('[id]')).map(e => e.id)")
    assert len(ids) == len(set(ids))
    # the running call's result arrives: it goes into that call, not the first with its id
    result("THIRD-OUTPUT")
    wait_for(browser, lambda b: inside(third)[1] is not None and "THIRD-OUTPUT" in inside(third)[1], timeout=15)
    assert inside(third)[0] == "done" and "THIRD-OUTPUT" not in inside(first)[1]
    def labelled(h):
        return [r.text for r in browser.find_elements(By.CSS_SELECTOR, f'[data-hash="{h}"] > summary > .ref, [data-hash="{h}"] > .meta > .ref')]

    # HEAD on a result, inside its call's fold: the call's summary names the branch (a
    # reload showed no visible label at all), live and as served
    wait_for(browser, lambda b: labelled(third) == ["main"], timeout=15)
    browser.refresh()
    wait_for(browser, lambda b: labelled(third) == ["main"], timeout=15)
    # a call on the tip has the branch's label, and loses it when the branch moves on
    fourth = call("echo FOURTH")
    wait_for(browser, lambda b: labelled(fourth) == ["main"], timeout=15)
    assert labelled(third) == []
    tip = cli("append", "assistant", "--text", "after the call")
    wait_for(browser, lambda b: labelled(tip) == ["main"], timeout=15)
    wait_for(browser, lambda b: labelled(fourth) == [], timeout=15)


def test_no_page_scrolls_sideways_on_a_narrow_screen_and_thinking_reads_as_text(browser, server, tape_dir):
    """A black-box audit at 400 px: the sessions page was 1,114 px wide, /stats 895, an
    entry page 717 (tables, 64-hex hashes, a session name with no spaces, the tape's path);
    and Claude Code's thinking parts showed as a JSON dump led by 1,300 characters of their
    base64 signature. Every page fits the width now, and thinking is folded text."""
    d, env = tape_dir
    name = "SWE-agent__SWE-agent__function_calling_replace_from_source__marshmallow-1867-" + "x" * 40
    signature = "EokMCkgICx" + "A" * 1300
    h = run_cli("--dir", d, "append", "assistant", json.dumps({"content": [
        {"type": "thinking", "thinking": "First I should read the file.\n\nThen **fix** it.", "signature": signature},
        {"type": "text", "text": "Done."}]}), "-s", name, env=env, check=True).stdout.decode().strip()
    browser.get(server + "/s/" + name)
    thinking = browser.find_element(By.CSS_SELECTOR, "details.thinking")
    thinking.find_element(By.TAG_NAME, "summary").click()
    assert "First I should read the file." in thinking.text and "fix" in thinking.find_element(By.TAG_NAME, "strong").text
    assert "EokMCkgICx" not in browser.find_element(By.ID, "entries").text
    browser.set_window_size(400, 800)
    try:
        for path in ("/", "/stats", "/e/" + h, "/s/" + name, "/s/evil"):
            browser.get(server + path)
            wide, seen = browser.execute_script("return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
            assert wide <= seen, (path, wide, seen)
    finally:
        browser.set_window_size(1400, 1000)


def test_a_reader_at_the_bottom_stays_there_as_entries_arrive_and_one_scrolled_up_keeps_the_place(browser, server, tape_dir):
    """An audit of the web view: with the newest entry in view, an append left the new entry
    ending at the window's edge and the rest of the page below it. A reader at the bottom
    stays at the very bottom, as a chat does; one scrolled up is not moved."""
    d, env = tape_dir

    def cli(*args):
        return run_cli("--dir", d, *args, "-s", "follow", env=env, check=True).stdout.decode().strip()

    for i in range(30):
        cli("append", "user" if i % 2 else "assistant", "--text", f"message {i} " + "word " * 40)
    browser.get(server + "/s/follow")
    gap = "return document.documentElement.scrollHeight - window.innerHeight - window.scrollY"
    browser.execute_script("window.scrollTo(0, document.documentElement.scrollHeight)")
    h = cli("append", "assistant", "--text", "the newest " + "word " * 60)
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, f'[data-hash="{h}"]'), timeout=15)
    wait_for(browser, lambda b: b.execute_script(gap) <= 1, timeout=5)  # at the very bottom
    browser.execute_script("window.scrollTo(0, 200)")
    h = cli("append", "user", "--text", "another")
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, f'[data-hash="{h}"]'), timeout=15)
    time.sleep(0.3)
    assert browser.execute_script("return window.scrollY") == 200


def test_the_tree_marks_the_entry_a_pinned_page_shows_and_no_label_is_cut(browser, server, tape_dir):
    """An audit of the web view: a page pinned with ?at= to an entry between two drawn nodes
    (a search hit) marked nothing in the tree; and labels of wide letters were cut at the
    drawing's right edge (its width took 7 px a character)."""
    d, env = tape_dir

    def cli(*args):
        return run_cli("--dir", d, *args, "-s", "pinned", env=env, check=True).stdout.decode().strip()

    hashes = [cli("append", "user", "--text", f"m{i}") for i in range(12)]
    cli("checkout", "-b", "WWWWWWWWWWWWMMMMMMMMMMMMMM", hashes[3])
    cli("append", "user", "--text", "on the wide branch")
    browser.get(server + f"/s/pinned?at={hashes[7]}")
    marked = browser.find_elements(By.CSS_SELECTOR, "svg.tree a.node.viewing")
    assert [a.get_attribute("data-hash") for a in marked] == [hashes[7]]
    cut = browser.execute_script("""
        const svg = document.querySelector('svg.tree'); const w = svg.width.baseVal.value;
        return Array.from(svg.querySelectorAll('a.node text')).filter(t => t.getBBox().x + t.getBBox().width > w).map(t => t.textContent);""")
    assert cut == []
