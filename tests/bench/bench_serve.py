"""How fast `ctape serve` shows a long session: a 10,000-entry session beside a 100-entry one.

    python tests/bench/bench_serve.py [--entries 10000] [--repeats 5]

Builds a tape from the benchmark workload (tests/bench/workload.py): session `big` with
N entries, 8 side branches and an anchor every 500 entries, and session `small` with 100.
For each, a fresh server process (`python -m ctape.web`) is started and timed:

    first     the first GET of the session page (walks the whole history for the tree)
    warm      the median of the next GETs of the same page
    live      the median GET of /s/NAME/head (what every open page polls)
    browser   the page load in headless Chromium (navigation start to the load event) on a
              fresh server, after the browser opened one page that reads nothing from the
              tape; when /usr/bin/chromium and chromedriver and selenium are there

and the ratio big/small for each, measured in the same run. Prints one JSON line per
session and a table on stderr.

Then (issue 25, `--huge-mb`, 0 skips it) one slow page beside a quick one, on one server:
session `huge` holds a message of that many MB, session `quick` two entries.

    huge page     the bytes and the time of the page of `huge`
    quick alone   the median GET of /s/quick with nothing else running
    quick during  the median GET of /s/quick while a client keeps asking for /s/huge
                  (each started while a /s/huge request was in flight)

and the ratio during/alone: with one lock for every route it is the huge page's time
over the quick page's; with requests in parallel, what two cores shared by two requests
cost.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)


def build(path: str, n: int) -> None:
    import ctape
    from workload import iter_session

    t = ctape.Tape.init(path)
    big = t.session("big")
    with t.batch():
        for i, (kind, payload, meta, delta) in enumerate(iter_session(n, seed=1)):
            big.append(kind, payload, meta=meta, delta=delta)
            if i and i % 500 == 0:
                big.append("anchor", {"name": f"milestone-{i // 500}"})
    head = big.head
    for b in range(8):
        big.branch(f"side-{b}", f"{head.hash}~{(b + 1) * (n // 10)}")
    small = t.session("small")
    with t.batch():
        for kind, payload, meta, delta in iter_session(100, seed=2):
            small.append(kind, payload, meta=meta, delta=delta)
    t.close()


def get(port: int, path: str) -> float:
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
    r = c.getresponse()
    body = r.read()
    c.close()
    assert r.status == 200 and body, (path, r.status)
    return time.perf_counter() - t0


def browser_load(url: str) -> float | None:
    if not (os.path.exists("/usr/bin/chromium") and os.path.exists("/usr/bin/chromedriver")):
        return None
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for f in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", f"--user-data-dir={tempfile.mkdtemp()}"):
        opts.add_argument(f)
    d = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    load = "const t = performance.getEntriesByType('navigation')[0]; return (t.loadEventEnd - t.startTime) / 1000;"
    try:
        # a fresh browser's first navigation pays for the browser itself: open a page
        # that reads nothing from the tape first, then the session page
        d.get(url.split("/s/")[0] + "/diff")
        return d.execute_script(load) if d.get(url) is None else None
    finally:
        d.quit()


def measure(tape: str, session: str, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.Popen([sys.executable, "-m", "ctape.web", "--dir", tape], stdout=subprocess.PIPE, text=True, env=env)
    try:
        url = p.stdout.readline().strip()
        port = int(url.rsplit(":", 1)[1].strip("/"))
        path = f"/s/{session}"
        first = get(port, path)
        warm = statistics.median(get(port, path) for _ in range(repeats))
        time.sleep(0.3)
        live = statistics.median(get(port, path + "/head") for _ in range(repeats))
        page_bytes = len(http_body(port, path))
    finally:
        p.terminate()
        p.wait()
    # the browser gets a fresh server too, so its load includes the first walk
    p = subprocess.Popen([sys.executable, "-m", "ctape.web", "--dir", tape], stdout=subprocess.PIPE, text=True, env=env)
    try:
        url = p.stdout.readline().strip()
        browser = browser_load(url.rstrip("/") + f"/s/{session}")
    finally:
        p.terminate()
        p.wait()
    return {"session": session, "first_s": round(first, 4), "warm_s": round(warm, 4), "live_poll_s": round(live, 5),
            "browser_load_s": None if browser is None else round(browser, 4), "page_bytes": page_bytes}


def http_body(port: int, path: str) -> bytes:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
    body = c.getresponse().read()
    c.close()
    return body


def build_huge(path: str, mb: int) -> None:
    import ctape

    t = ctape.Tape.init(path)
    t.session("huge").append("user", {"content": "# a huge paste\n\n" + ("y" * 99 + "\n") * (mb * 10_486)})
    q = t.session("quick")
    q.append("user", {"content": "a short question"})
    q.append("assistant", {"content": "a short answer"})
    t.close()


def slow_beside_quick(tape: str, repeats: int) -> dict:
    import threading

    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.Popen([sys.executable, "-m", "ctape.web", "--dir", tape], stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = int(p.stdout.readline().strip().rsplit(":", 1)[1].strip("/"))
        get(port, "/s/quick")
        t0 = time.perf_counter()
        huge_bytes = len(http_body(port, "/s/huge"))
        huge_s = time.perf_counter() - t0
        alone = statistics.median(get(port, "/s/quick") for _ in range(repeats))
        in_flight = threading.Event()
        stop = threading.Event()
        served = [0]

        def keep_asking() -> None:
            while not stop.is_set():
                in_flight.set()
                http_body(port, "/s/huge")
                in_flight.clear()
                served[0] += 1

        th = threading.Thread(target=keep_asking, daemon=True)
        th.start()
        during = []
        while len(during) < repeats:
            in_flight.wait()
            time.sleep(0.05)  # the huge request is being read by the server
            if in_flight.is_set():  # still in flight as the quick one starts
                during.append(get(port, "/s/quick"))
        stop.set()
        th.join()
    finally:
        p.terminate()
        p.wait()
    return {"huge_page_bytes": huge_bytes, "huge_page_s": round(huge_s, 3), "quick_alone_s": round(alone, 4),
            "quick_during_s": round(statistics.median(during), 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--huge-mb", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        os.environ.setdefault("CTAPE_CACHE_DIR", os.path.join(d, "cache"))
        tape = os.path.join(d, "tape")
        t0 = time.perf_counter()
        build(tape, args.entries)
        sys.stderr.write(f"built the tape in {time.perf_counter() - t0:.1f} s\n")
        rows = [measure(tape, "big", args.repeats), measure(tape, "small", args.repeats)]
    big, small = rows
    for r in rows:
        print(json.dumps(r))
    sys.stderr.write(f"{'session page':<14}{'first GET':>11}{'warm GET':>10}{'head poll':>11}{'browser load':>14}{'page KB':>9}\n")
    for r in rows:
        b = "-" if r["browser_load_s"] is None else f"{r['browser_load_s']:.3f} s"
        sys.stderr.write(f"{r['session']:<14}{r['first_s']:>9.3f} s{r['warm_s']:>8.3f} s{r['live_poll_s'] * 1000:>8.2f} ms{b:>14}{r['page_bytes'] / 1024:>9.0f}\n")

    def ratio(k):
        return "-" if not big[k] or not small[k] else f"{big[k] / small[k]:.2f}x"

    sys.stderr.write(f"{'big / small':<14}{ratio('first_s'):>11}{ratio('warm_s'):>10}{ratio('live_poll_s'):>11}{ratio('browser_load_s'):>14}\n")
    if args.huge_mb:
        with tempfile.TemporaryDirectory() as d:
            os.environ["CTAPE_CACHE_DIR"] = os.path.join(d, "cache")
            build_huge(os.path.join(d, "tape"), args.huge_mb)
            r = slow_beside_quick(os.path.join(d, "tape"), args.repeats)
        print(json.dumps({"huge_mb": args.huge_mb, **r}))
        sys.stderr.write(f"a {args.huge_mb} MB message: page {r['huge_page_bytes'] / 1024:.0f} KB in {r['huge_page_s']:.2f} s; "
                         f"/s/quick alone {r['quick_alone_s'] * 1000:.1f} ms, while /s/huge is served {r['quick_during_s'] * 1000:.1f} ms "
                         f"({r['quick_during_s'] / r['quick_alone_s']:.1f}x)\n")


if __name__ == "__main__":
    main()
