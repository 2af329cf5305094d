"""Token usage and cost from what importers and integrations recorded."""

import json
import os

import pytest

from ctape import Tape
from ctape.ops.usage import load_prices, normalize, price_of

from conftest import run_cli, snapshot

FIX = "/work/shared/fixtures/transcripts"
CLAUDE = f"{FIX}/claude-code/daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"
CODEX = f"{FIX}/codex-rollout/codemie-ai__codemie-code__rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"


def _expected_claude(path):
    """What the file says, counted by hand: one response per message id, at its largest."""
    per_msg = {}
    for line in open(path, encoding="utf-8"):
        rec = json.loads(line)
        msg = rec.get("message")
        if rec.get("type") == "assistant" and isinstance(msg, dict) and "usage" in msg:
            u = msg["usage"]
            old = per_msg.get(msg["id"], (0, 0, 0, 0))
            per_msg[msg["id"]] = tuple(max(a, b) for a, b in zip(old, (u["input_tokens"], u["output_tokens"], u["cache_read_input_tokens"], u["cache_creation_input_tokens"])))
    return [sum(v[i] for v in per_msg.values()) for i in range(4)]


def _expected_codex(path):
    seen, sums = set(), [0, 0, 0]
    for line in open(path, encoding="utf-8"):
        rec = json.loads(line)
        p = rec.get("payload") or {}
        if p.get("type") == "token_count" and p.get("info"):
            key = json.dumps(p["info"]["total_token_usage"], sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            last = p["info"]["last_token_usage"]
            sums[0] += last["input_tokens"] - last["cached_input_tokens"]
            sums[1] += last["output_tokens"]
            sums[2] += last["cached_input_tokens"]
    return sums


@pytest.mark.skipif(not os.path.exists(CLAUDE) or not os.path.exists(CODEX), reason="fixtures not present")
def test_real_transcripts(tape_dir):
    run_cli("--dir", tape_dir, "import", "claude-code", CLAUDE, "-s", "cc", check=True)
    run_cli("--dir", tape_dir, "import", "codex", CODEX, "-s", "cx", check=True)
    with Tape.open(tape_dir) as t:
        rows = {r["session"]: r for r in t.usage()}
        inp, out, cached, write = _expected_claude(CLAUDE)
        cc = rows["cc"]
        assert (cc["input"], cc["output"], cc["cached"], cc["cache_write"]) == (inp, out, cached, write)
        assert cc["models"] == ["claude-sonnet-4-20250514"]
        # claude-sonnet-4: $3 in, $15 out, $0.30 cache reads, $3.75 cache writes per million
        assert cc["cost"] == pytest.approx((inp * 3 + out * 15 + cached * 0.3 + write * 3.75) / 1e6, abs=1e-6)
        cx = rows["cx"]
        assert [cx["input"], cx["output"], cx["cached"]] == _expected_codex(CODEX)
        assert cx["models"] == ["gpt-5.5"] and cx["unpriced_tokens"] == 0
        # gpt-5.5 (standard tier): $5 in, $30 out, $0.50 cached per million
        assert cx["cost"] == pytest.approx((cx["input"] * 5 + cx["output"] * 30 + cx["cached"] * 0.5) / 1e6, abs=1e-6)
        by_model = {r["model"]: r for r in t.usage(by="model")}
        assert set(by_model) == {"claude-sonnet-4-20250514", "gpt-5.5"}
        days = t.usage(by="day")
        assert [d["day"] for d in days] == sorted(d["day"] for d in days)
        assert sum(d["total"] for d in days) == cc["total"] + cx["total"]
        assert t.usage(since="2026-01-01T00:00:00Z")[0]["session"] == "cx"  # cc is from 2025
    # an override prices the unknown model
    prices = os.path.join(os.path.dirname(tape_dir), "prices.json")
    with open(prices, "w") as f:
        json.dump({"gpt-5.5": {"input": 1.0, "output": 2.0, "cached": 0.5}}, f)
    p = run_cli("--dir", tape_dir, "usage", "--json", "--prices", prices, check=True)
    rows = {r["session"]: r for r in map(json.loads, p.stdout.decode().splitlines())}
    cx = rows["cx"]
    assert cx["cost"] == pytest.approx((cx["input"] * 1 + cx["output"] * 2 + cx["cached"] * 0.5) / 1e6, abs=1e-6)
    p = run_cli("--dir", tape_dir, "usage", env={"CTAPE_PRICES": prices}, check=True)
    lines = p.stdout.decode().splitlines()
    assert lines[0].split() == ["SESSION", "INPUT", "OUTPUT", "CACHED", "CACHE-WRITE", "COST"]
    assert all("$" in line for line in lines[1:])
    # the TOTAL row adds the others up
    assert lines[-1].split()[0] == "TOTAL" and len(lines) == 4
    figures = [[int(c.replace(",", "")) for c in line.split()[1:5]] for line in lines[1:3]]
    assert [int(c.replace(",", "")) for c in lines[-1].split()[1:5]] == [a + b for a, b in zip(*figures)]
    assert float(lines[-1].split()[5].lstrip("$")) == pytest.approx(sum(float(line.split()[5].lstrip("$")) for line in lines[1:3]), abs=0.011)


FIXTURES = "/work/shared/fixtures/transcripts"


@pytest.mark.skipif(not os.path.isdir(FIXTURES), reason="fixtures not present")
def test_every_model_in_the_fixtures_has_a_price(tape_dir):
    for folder in ("claude-code", "codex-rollout", "openai-chat"):
        for name in sorted(os.listdir(os.path.join(FIXTURES, folder))):
            run_cli("--dir", tape_dir, "import", os.path.join(FIXTURES, folder, name), check=True)
    p = run_cli("--dir", tape_dir, "usage", "--by", "model", "--json", check=True)
    rows = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert len(rows) >= 5
    assert [r["model"] for r in rows if r["cost"] is None or r["unpriced_tokens"]] == []


@pytest.mark.skipif(not os.path.exists(CLAUDE) or not os.path.exists(CODEX), reason="fixtures not present")
def test_the_web_shows_the_figures_of_ctape_usage(tape_dir):
    """One code path: the session list, a session's page and the stats page give what
    `ctape usage` gives (codex input and cache tokens included), with the TOTAL row."""
    import re
    import subprocess
    import sys
    import time
    import urllib.request

    run_cli("--dir", tape_dir, "import", "claude-code", CLAUDE, "-s", "cc", check=True)
    run_cli("--dir", tape_dir, "import", "codex", CODEX, "-s", "cx", check=True)
    rows = {r["session"]: r for r in map(json.loads, run_cli("--dir", tape_dir, "usage", "--json", check=True).stdout.decode().splitlines())}
    total = run_cli("--dir", tape_dir, "usage", check=True).stdout.decode().splitlines()[-1].split()
    server = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "serve", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = server.stdout.readline().decode().strip().rstrip("/")
        stats = urllib.request.urlopen(url + "/stats").read().decode()  # waits for the figures
        listing = urllib.request.urlopen(url + "/").read().decode()
        for _ in range(50):
            if "…</td></tr>" not in listing:
                break
            time.sleep(0.1)
            listing = urllib.request.urlopen(url + "/").read().decode()
        session = urllib.request.urlopen(url + "/s/cx").read().decode()
    finally:
        server.terminate()
        server.wait()
    for name, r in rows.items():
        cells = re.search(rf"<tr><td>{name}</td>" + r'<td class="num">([\d,]+)</td>' * 4 + r'<td class="num">([^<]+)</td>', stats)
        assert cells, name
        assert [int(c.replace(",", "")) for c in cells.groups()[:4]] == [r["input"], r["output"], r["cached"], r["cache_write"]]
        assert cells.group(5) == f"${r['cost']:,.2f}"
        assert f"{r['input']:,} in / {r['output']:,} out / {r['cached']:,} cached" in listing
    assert rows["cx"]["input"] > 1_000_000 and f"{rows['cx']['input']:,} in" in session
    cells = re.search(r"<tr class=total><td>TOTAL</td>" + r'<td class="num">([\d,]+)</td>' * 4 + r'<td class="num">([^<]+)</td>', stats)
    assert cells and list(cells.groups()) == total[1:]


def test_generic_usage_meta_and_sharing(tape):
    s = tape.session("mine")
    s.append("assistant", {"content": "hi"}, meta={"model": "gpt-4o", "usage": {"prompt_tokens": 1000, "completion_tokens": 100,
                                                                          "prompt_tokens_details": {"cached_tokens": 400}}})
    s.append("assistant", {"content": "x"}, meta={"pydantic_ai.message": {"model_name": "mystery-1", "usage": {"input_tokens": 50, "output_tokens": 5}}})
    s.append("user", {"content": "no usage here"})
    # a session sharing the history counts nothing twice
    tape.session("copy").set_refs("branch", {"main": s.head.hash, "HEAD": "@main"})
    rows = tape.usage()
    assert [r["session"] for r in rows] == ["mine"]
    r = rows[0]
    assert (r["input"], r["output"], r["cached"]) == (600 + 50, 105, 400)
    assert r["cost"] == pytest.approx((600 * 2.5 + 100 * 10 + 400 * 1.25) / 1e6)
    assert r["unpriced_tokens"] == 55


def test_price_matching():
    table = load_prices()
    assert price_of("claude-sonnet-4-20250514", table) == table["claude-sonnet-4"]
    assert price_of("claude-sonnet-4-5-20250929", table) == table["claude-sonnet-4-5"]
    assert price_of("gpt-5.3-codex", table) == table["gpt-5.3-codex"]  # its own price, not gpt-5's
    assert price_of("gpt-5.9-codex", table) is None  # an unknown model has no price
    assert price_of(None, table) is None
    assert normalize({"input_tokens": 10, "cached_input_tokens": 4, "output_tokens": 3}) == {"input": 6, "output": 3, "cached": 4, "cache_write": 0}


@pytest.mark.parametrize("args, code", [(["--by", "week"], 2), (["--since", "nonsense"], 2), (["--prices", "/nonexistent.json"], 2)])
def test_bad_usage_input(tape_dir, args, code):
    with Tape.open(tape_dir) as t:
        t.session("s").append("user", {"content": "x"})
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "usage", *args)
    assert p.returncode == code and p.stderr.decode().count("\n") == 1
    assert snapshot(tape_dir) == before


def test_bad_price_file(tape_dir, tmp_path):
    with Tape.open(tape_dir) as t:
        t.session("s").append("assistant", {"content": "x"}, meta={"model": "m", "usage": {"input_tokens": 1}})
    for body in ("not json", '{"m": {"input": "cheap"}}', "[1]",
                 '{"m": {"input": NaN}}', '{"m": {"input": 1e999}}', '{"m": {"input": -1}}',  # NaN made invalid --json
                 '{"m": {"inptu": 1.25}}', '{"m": {"input": true}}', '{"m": 3}'):  # a typo priced m at $0
        f = tmp_path / "p.json"
        f.write_text(body)
        p = run_cli("--dir", tape_dir, "usage", "--prices", f)
        assert p.returncode == 2 and b"price table" in p.stderr, (body, p.stderr)
        assert len(p.stderr.splitlines()) == 1 and p.stdout == b"", body


def test_a_model_that_is_not_text_counts_without_a_model(tape_dir, tmp_path):
    """An imported Claude Code record whose `message.model` is an object: `ctape usage`
    stopped with "internal error: TypeError", and in `serve` the usage thread died at
    every request, the figures stayed `…`, and /stats said no usage was recorded (found by
    an audit). Its tokens count, under no model."""
    src = tmp_path / "cc.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in [
        {"parentUuid": None, "type": "user", "uuid": "u1", "sessionId": "s", "cwd": "/p", "timestamp": "2025-07-14T22:59:30.699Z",
         "message": {"role": "user", "content": "hi"}},
        {"parentUuid": "u1", "type": "assistant", "uuid": "a1", "sessionId": "s", "cwd": "/p", "timestamp": "2025-07-14T22:59:31.699Z",
         "message": {"id": "m1", "type": "message", "role": "assistant", "model": {"name": "claude-sonnet-4"},
                     "content": [{"type": "text", "text": "hello"}], "usage": {"input_tokens": 5, "output_tokens": 7}}},
    ]) + "\n")
    run_cli("--dir", tape_dir, "import", "claude-code", src, "-s", "cc", check=True)
    p = run_cli("--dir", tape_dir, "usage", "--by", "model", "--json")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert [(r["input"], r["output"]) for r in rows if r["model"] == "(unknown)"] == [(5, 7)], rows


def test_an_absurd_count_counts_zero_and_stops_nothing(tape_dir):
    """A record whose input_tokens was 10**309 made `ctape usage` stop with "internal error:
    OverflowError", and `serve` showed no usage for any session of the tape (found by an
    audit). A count that is not a positive integer up to 10**15 counts 0; the rest adds up."""
    t = Tape.open(tape_dir)
    s = t.session("odd")
    s.append("assistant", {"content": "a"}, meta={"model": "gpt-4o", "usage": {"prompt_tokens": 10**309, "completion_tokens": 10}})
    s.append("assistant", {"content": "b"}, meta={"model": "gpt-4o", "usage": {"prompt_tokens": 10**15 + 1, "completion_tokens": -3}})
    t.session("plain").append("assistant", {"content": "c"}, meta={"model": "gpt-4o", "usage": {"prompt_tokens": 100, "completion_tokens": 10**15}})
    t.close()
    p = run_cli("--dir", tape_dir, "usage", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["session"]: r for r in map(json.loads, p.stdout.decode().splitlines())}
    assert (rows["odd"]["input"], rows["odd"]["output"]) == (0, 10)
    assert (rows["plain"]["input"], rows["plain"]["output"]) == (100, 10**15)
