"""`ctape serve` in a real headless Chromium (Debian's chromium + chromium-driver, driven by
Selenium; .ci/run installs them). Skipped, with the reason, only when they are absent.

The screenshots in docs/ come from tests/serve_screenshots.py.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import run_cli

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip("Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver; .ci/run does it)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.common.exceptions import NoAlertPresentException
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
    return WebDriverWait(browser, timeout, poll_frequency=0.1).until(lambda d: cond(d))


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
