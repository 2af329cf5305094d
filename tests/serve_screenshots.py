"""Screenshots of `ctape serve` for the docs (not a test; needs Debian's chromium + selenium).

    python tests/serve_screenshots.py docs/

Records the demo (`ctape demo`), imports one real Claude Code transcript from
tests/fixtures/transcripts, serves the tape and saves docs/serve-*.png.
"""

import glob
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main(out: str) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    d = tempfile.mkdtemp()
    tape = os.path.join(d, "tape")
    env = {**os.environ, "CTAPE_CACHE_DIR": os.path.join(d, "cache")}
    run = [sys.executable, "-m", "ctape", "--dir", tape]
    subprocess.run([*run, "demo"], env=env, check=True, capture_output=True)
    subprocess.run([*run, "tag", "-s", "demo", "first-try", "main~4"], env=env, check=True, capture_output=True)
    cc = sorted(glob.glob(os.path.join(HERE, "fixtures", "transcripts", "claude-code", "daaain__claude-code-log__fe869ecb*.jsonl")))
    if cc:
        subprocess.run([*run, "import", "claude-code", cc[0], "-s", "claude-code-log"], env=env, check=True, capture_output=True)
    server = subprocess.Popen([sys.executable, "-m", "ctape.web", "--dir", tape], stdout=subprocess.PIPE, text=True, env=env)
    url = server.stdout.readline().strip().rstrip("/")
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for f in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--window-size=1400,1000", f"--user-data-dir={os.path.join(d, 'profile')}"):
        opts.add_argument(f)
    b = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    try:
        def shot(name, path, prepare=None):
            b.get(url + path)
            time.sleep(1.5)  # let the tree finish reading the history
            if prepare:
                prepare()
            b.save_screenshot(os.path.join(out, f"serve-{name}.png"))

        def open_tool():
            b.find_element(By.CSS_SELECTOR, 'details.tool[data-call-id="call_1"] summary').click()

        if cc:  # read once, so that the sessions page knows its usage
            b.get(url + "/stats")
        shot("sessions", "/?q=calc.py")
        shot("session", "/s/demo", open_tool)
        b.get(url + "/s/demo")
        b.find_element(By.CSS_SELECTOR, 'svg.tree a.node[data-labels="retry"]').click()
        time.sleep(1)
        b.save_screenshot(os.path.join(out, "serve-branch.png"))
        shot("diff", "/diff?s=demo&a=main&b=retry")
        if cc:  # its header (usage, source) rather than its newest entries, where a page opens
            shot("import", "/s/claude-code-log", lambda: b.execute_script("window.scrollTo(0, 0)"))
        shot("stats", "/stats")
    finally:
        b.quit()
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
