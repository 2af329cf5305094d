"""Odd numbers, durations and times never make an internal error (issue 20, item 10).

Every CLI option that takes a number, a duration or a time, and every JSON number that
can reach the tape (payload, --meta, --delta, import files of every format), given huge,
negative, fractional or non-finite values: the command succeeds (exit 0) or refuses with
one `ctape: error:` line (exit 2) and leaves the tape directory byte-identical. Never
exit 1, never a traceback.

The options are found by walking the click command tree (NUMBER_OPTIONS must name each
one), so a new option that takes a number or a time is noticed here.
"""

import json

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli, snapshot
from ctape import Tape
from ctape.cli import main

V = "{V}"  # where the value goes
# (command, option) -> the arguments that run the command with value V
NUMBER_OPTIONS = {
    ("append", "--time"): ["append", "user", '{"content": "x"}', "-s", "chat", "--time", V],
    ("log", "-n"): ["log", "-s", "chat", "-n", V],
    ("log", "--since"): ["log", "-s", "chat", "--since", V],
    ("log", "--until"): ["log", "-s", "chat", "--until", V],
    ("context", "--max-tokens"): ["context", "-s", "chat", "--max-tokens", V],
    ("reflog", "-n"): ["reflog", "chat", "-n", V],
    ("compact", "--expire"): ["compact", "--expire", V],
    ("compact", "--grace"): ["compact", "--grace", V, "--dry-run"],
    ("search", "--since"): ["search", "one", "-s", "chat", "--since", V],
    ("search", "--until"): ["search", "one", "-s", "chat", "--until", V],
    ("search", "-n"): ["search", "one", "-s", "chat", "-n", V],
    ("usage", "--since"): ["usage", "--since", V],
    ("diff", "-n"): ["diff", "main", "main", "-s", "chat", "-n", V],
    ("watch", "--jobs"): ["watch", "--once", "-q", "-j", V, "{EMPTY}"],
    # these run until stopped: only their arguments are parsed (make_context)
    ("stream", "--interval"): None,
    ("serve", "--port"): None,
}
TIME_METAVARS = {"T", "DUR", "RFC3339", "N", "SECONDS"}


def number_options():
    """(command path, option) of every option whose value is a number, duration or time."""
    found = set()

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, path + [name])
        for p in cmd.params:
            if not isinstance(p, click.Option) or p.is_flag:
                continue
            numeric = isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType))
            timeish = p.type.name in ("dur", "t") or (p.metavar or "").upper() in TIME_METAVARS
            if numeric or timeish:
                found.add((" ".join(path), max(p.opts, key=len)))

    walk(main, [])
    return found


def test_every_number_option_is_listed():
    assert number_options() == set(NUMBER_OPTIONS), "add the new option to NUMBER_OPTIONS (and a way to run it)"


# -- values -----------------------------------------------------------------------------

ODD = [
    "99999999999999999999d", "9" * 400 + "d", "1" + "0" * 5000 + "d", "1" + "0" * 5000, "9" * 400,
    "-" + "9" * 400, "-1", "-0", "0", "-0.0", "1e400", "-1e400", "1e-400", "nan", "NaN", "inf", "-inf",
    "Infinity", "0x10", "1_000", "1.5", "1.5h", "365000d", "365001d", "0s", "now", "2w", "-2h", "٣d", "²d",
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "10000-01-01", "0000-01-01",
    "2026-02-30", "2026-01-02T03:04:05z", "2026-01-02T03:04:05Z", "2026-01-02", " 3 d ", "", " ",
]
digits = st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n)
durations = st.builds(lambda n, u: f"{n}{u}", st.one_of(st.integers(min_value=0), digits), st.sampled_from("smhdw"))
times = st.builds(
    lambda y, rest: f"{y:04d}{rest}",
    st.integers(min_value=0, max_value=99999),
    st.sampled_from(["-01-01", "-12-31T23:59:59+14:00", "-01-01T00:00:00-23:59", "-06-15T12:00:00Z"]),
)
values = st.one_of(
    st.sampled_from(ODD),
    digits,
    st.integers().map(str),
    st.floats().map(repr),
    durations,
    times,
    st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=12),
)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("classtape")
    t = Tape.init(d / "tape")
    s = t.session("chat")
    s.append("user", {"content": "one"})
    s.append("assistant", {"content": "two"})
    t.close()
    (d / "empty").mkdir()
    return d


def run_in_process(tape_dir, args, input=None):
    r = CliRunner().invoke(main, ["--dir", str(tape_dir), *args], input=input)
    out = r.stdout + r.stderr
    # an exception that escaped the one place errors become exit codes counts as a traceback
    escaped = r.exception if r.exception is not None and not isinstance(r.exception, SystemExit) else None
    return r.exit_code, out, r.stderr, escaped


def check(tape_dir, args, input=None):
    before = snapshot(tape_dir)
    code, out, err, escaped = run_in_process(tape_dir, args, input)
    assert escaped is None, f"{args}: {escaped!r}"
    assert "Traceback" not in out and "internal error" not in out, out
    assert code in (0, 2), (args, code, err)
    if code == 2:
        assert len(err.splitlines()) == 1 and err.startswith("ctape: error: "), err
        assert snapshot(tape_dir) == before, f"{args}: refused, yet the tape changed"


def parse_only(command, option, value):
    cmd = main.commands[command]
    try:
        cmd.make_context(command, [option, value], parent=click.Context(main))
    except click.UsageError:
        pass  # exit 2 through CtapeGroup.main
    except Exception as e:  # noqa: BLE001
        from ctape.errors import InvalidInput

        assert isinstance(e, InvalidInput), f"{command} {option} {value!r}: {e!r}"


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(key=st.sampled_from(sorted(NUMBER_OPTIONS)), value=values)
def test_number_options_never_fail_internally(chat_dir, key, value):
    template = NUMBER_OPTIONS[key]
    if template is None:
        parse_only(key[0], key[1], value)
        return
    args = [str(chat_dir / "empty") if a == "{EMPTY}" else value if a == V else a for a in template]
    check(chat_dir / "tape", args)


# the cases the issue names, through the real command (a subprocess: no traceback anywhere)
@pytest.mark.parametrize(
    "args",
    [
        ["append", "user", '{"content": 1' + "0" * 5000 + "}", "-s", "chat"],
        ["compact", "--expire", "99999999999999999999d"],
        ["compact", "--expire", "9" * 400 + "d"],
        ["log", "-s", "chat", "--since", "9" * 400 + "d"],
        ["search", "one", "--since", "99999999999999999999d"],
        ["usage", "--since", "0001-01-01T00:00:00+01:00"],
    ],
    ids=["payload-5000-digits", "expire-20-nines", "expire-400-nines", "log-since", "search-since", "usage-since"],
)
def test_named_cases_are_one_line_bad_input(chat_dir, args):
    tape_dir = chat_dir / "tape"
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, *args)
    err = p.stderr.decode()
    assert p.returncode == 2 and "Traceback" not in err, err
    assert len(err.splitlines()) == 1 and err.startswith("ctape: error: ") and "internal error" not in err, err
    assert snapshot(tape_dir) == before


@pytest.mark.parametrize("interval", ["nan", "inf", "1e400", "0", "-1"])
def test_stream_interval_is_checked_before_anything_runs(chat_dir, interval):
    tape_dir = chat_dir / "tape"
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "stream", "-s", "chat", "--interval", interval, input=b"hello")
    err = p.stderr.decode()
    assert p.returncode == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert snapshot(tape_dir) == before


# -- JSON numbers on their way to the tape ------------------------------------------------

NUMBERS = [
    "1" + "0" * 5000, "-" + "9" * 4301, "9" * 4300, "9" * 400, "-0", "-0.0", "0.0", "1e400", "-1e400",
    "1e-400", "1E308", "NaN", "Infinity", "-Infinity", "123456789012345678901234567890.5e-3",
]
numbers = st.one_of(
    st.sampled_from(NUMBERS),
    st.integers().map(str),
    st.integers(min_value=1, max_value=6000).map(lambda n: "-" * (n % 2) + "7" * n),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(-99, 99), st.integers(-2000, 2000)),
)


def record_file(fmt, number, path):
    """A small transcript of `fmt` whose second record holds the number (JSON text)."""
    n = number
    if fmt == "claude-code":
        lines = [
            '{"type": "user", "uuid": "u1", "parentUuid": null, "sessionId": "s", "timestamp": "2026-01-01T00:00:01Z", "message": {"role": "user", "content": "hi"}}',
            '{"type": "assistant", "uuid": "u2", "parentUuid": "u1", "sessionId": "s", "timestamp": "2026-01-01T00:00:02Z", "message": {"role": "assistant", "content": [{"type": "text", "text": "yo"}], "usage": {"input_tokens": %s}}}' % n,
        ]
    elif fmt == "codex":
        lines = [
            '{"timestamp": "2026-01-01T00:00:01Z", "type": "session_meta", "payload": {"id": "cx", "cwd": "/"}}',
            '{"timestamp": "2026-01-01T00:00:02Z", "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}], "n": %s}}' % n,
        ]
    elif fmt == "openai":
        lines = ['{"role": "user", "content": "hi"}', '{"role": "assistant", "content": "yo", "n": %s}' % n]
    elif fmt == "openai-document":
        lines = ['[{"role": "user", "content": "hi"},', ' {"role": "assistant", "content": "yo", "n": %s}]' % n]
    else:  # jsonl: ctape's own export, with the number in an entry's payload
        lines = [
            '{"ctape": "export", "session": "j", "version": 1}',
            '{"delta": null, "hash": "%s", "kind": "user", "meta": {}, "parent": null, "payload": {"content": %s}, "seq": 1, "time": "2026-01-01T00:00:00.000000Z"}' % ("0" * 64, n),
        ]
    path.write_text("\n".join(lines) + "\n")
    return "openai" if fmt == "openai-document" else fmt


def where_numbers_go(tmp, number):
    """Every way a JSON number reaches the tape: (arguments, stdin)."""
    yield ["append", "user", '{"content": "x", "n": %s}' % number, "-s", "chat"], None
    yield ["append", "user", "-", "-s", "chat"], ('{"content": [%s]}' % number).encode()
    yield ["append", "user", '{"content": "x"}', "-s", "chat", "--delta", '{"n": %s}' % number], None
    yield ["append", "user", '{"content": "x"}', "-s", "chat", "--meta", f"n={number}"], None
    yield ["append", "tool_call", '{"call_id": "c", "name": "f", "arguments": {"x": %s}}' % number, "-s", "chat"], None
    for fmt in ("claude-code", "codex", "openai", "openai-document", "jsonl"):
        path = tmp / f"{fmt}.jsonl"
        yield ["import", record_file(fmt, number, path), str(path), "-s", "imp"], None
        yield ["import", str(path), "-s", "det"], None  # format detected


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(number=numbers)
def test_json_numbers_never_fail_internally(chat_dir, tmp_path_factory, number):
    tmp = tmp_path_factory.mktemp("numbers")
    for args, stdin in where_numbers_go(tmp, number):
        check(chat_dir / "tape", args, input=stdin)


def test_bad_numbers_in_payload_and_delta_are_refused_and_odd_ones_kept(chat_dir):
    tape_dir = chat_dir / "tape"
    for number in ("1" + "0" * 5000, "NaN", "-Infinity", "1e400"):
        for args in (
            ["append", "user", '{"content": %s}' % number, "-s", "chat"],
            ["append", "user", '{"content": "x"}', "-s", "chat", "--delta", '{"n": %s}' % number],
        ):
            before = snapshot(tape_dir)
            code, _, err, escaped = run_in_process(tape_dir, args)
            assert escaped is None and code == 2, (args[:3], code, err)
            assert "write it as a string" in err, err
            assert snapshot(tape_dir) == before
    big = "9" * 4300  # JSON that ctape can write and read back is kept
    code, out, err, _ = run_in_process(tape_dir, ["append", "user", '{"content": [%s, -0, -0.0, 1e-400]}' % big, "-s", "chat"])
    assert code == 0, err
    e = json.loads(run_in_process(tape_dir, ["show", out.strip(), "--json"])[1])
    assert e["payload"]["content"] == [int(big), 0, -0.0, 0.0]


# -- counts in refs (~N, @{N}) and the Python API's durations and times ------------------------

HUGE_REFS = {
    "tilde-5000-digits": "chat~1" + "0" * 5000,
    "reflog-400-nines": "chat@{" + "9" * 400 + "}",
    "tilde-13-digits": "chat~1000000000000",
    "tilde-sum": "chat" + "~999999999999" * 3,
    "branch-tilde-5000": "chat/main~" + "7" * 5000 + "^",
}


@pytest.mark.parametrize("command", ["log", "show", "checkout", "state"])
@pytest.mark.parametrize("ref", sorted(HUGE_REFS), ids=str)
def test_absurd_counts_in_a_ref_are_a_bad_ref(chat_dir, command, ref):
    """`ctape log x~1<5000 zeros>` was an internal error (int() of 5000 digits), and
    `x@{<400 nines>}` a not-found echoing all 400 nines: both are a bad ref, one short line."""
    tape_dir = chat_dir / "tape"
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, command, HUGE_REFS[ref], "-s", "chat")
    err = p.stderr.decode()
    assert p.returncode == 2, (p.returncode, err)
    assert len(err.splitlines()) == 1 and err.startswith("ctape: error: invalid ref ") and len(err) < 200, err
    assert "no history is that long" in err
    assert snapshot(tape_dir) == before


@settings(max_examples=200, deadline=None)
@given(digits=st.one_of(st.integers(min_value=0).map(str), st.integers(1, 6000).map(lambda n: "9" * n)),
       form=st.sampled_from(["x~{}", "x@{{{}}}", "x~{}^", "x@{{{}}}~{}"]))
def test_any_count_parses_or_is_invalid_input(digits, form):
    from ctape.errors import InvalidInput
    from ctape.model.refspec import MAX_COUNT, parse_ref

    big = len(digits.lstrip("0")) > 12 or int(digits) >= MAX_COUNT  # (int() of 6000 digits fails here too)
    try:
        spec = parse_ref(form.format(digits, digits))
    except InvalidInput as e:
        assert big and len(str(e)) < 200, (digits, str(e))
        return
    assert spec.back <= MAX_COUNT and (spec.reflog or 0) <= MAX_COUNT


BAD_DURATIONS = ["99999999999999999999d", "9" * 400 + "d", "1" + "0" * 5000 + "s", float("nan"), float("inf"), -1, 1e300, "-3d", "2x"]


@pytest.mark.parametrize("value", BAD_DURATIONS, ids=lambda v: repr(v)[:24])
def test_python_api_durations_and_times_are_invalid_input(chat_dir, tmp_path, value):
    """compact.py and logview.py had parsers of their own: `tape.compact(expire="99999999999999999999d")`
    overflowed (OverflowError), 5,000 digits were a ValueError. They are timespec's now."""
    from ctape.errors import InvalidInput

    t = Tape.init(tmp_path / "t")
    try:
        t.session("chat").append("user", {"content": "one"})
        before = snapshot(tmp_path / "t")
        with pytest.raises(InvalidInput):
            t.compact(expire=value)
        with pytest.raises(InvalidInput):
            t.compact(grace=value, dry_run=True)
        if not (isinstance(value, (int, float)) and value == -1):  # -1 is a time: 1969-12-31T23:59:59Z
            with pytest.raises(InvalidInput):
                list(t.session("chat").log(since=value))
            with pytest.raises(InvalidInput):
                list(t.session("chat").log(until=value))
        assert snapshot(tmp_path / "t") == before
    finally:
        t.close()


def test_python_api_numbers_still_work(tmp_path):
    t = Tape.init(tmp_path / "t")
    try:
        s = t.session("chat")
        s.append("user", {"content": "one"})
        assert [e.payload["content"] for e in s.log(since=0)] == ["one"]
        assert list(s.log(until=0)) == []
        assert t.compact(expire=0, grace=0.0, dry_run=True) is not None
    finally:
        t.close()


def test_python_api_takes_timedelta_and_datetime(tmp_path):
    """`tape.compact(expire=timedelta(days=1))` was refused as "invalid --expire
    datetime.timedelta(days=1)" (found by a contract audit); a Python caller's own types
    for a duration and a time are taken: timedelta for compact's durations and for log's
    since/until (that long ago), datetime for since/until."""
    from datetime import datetime, timedelta, timezone

    from ctape.errors import InvalidInput

    t = Tape.init(tmp_path / "t")
    try:
        s = t.session("chat")
        e = s.append("user", {"content": "one"})
        assert t.compact(expire=timedelta(days=1), grace=timedelta(hours=2), dry_run=True)["dry_run"] is True
        assert t.compact(expire=timedelta(0), grace=timedelta(0))["kept_objects"] >= 1
        assert [x.hash for x in s.log(since=timedelta(hours=1))] == [e.hash]
        assert list(s.log(until=timedelta(hours=1))) == []
        assert [x.hash for x in s.log(since=datetime.now(timezone.utc) - timedelta(minutes=5))] == [e.hash]
        assert list(s.log(since=datetime.now() + timedelta(days=1))) == []  # naive: UTC, as ctape's times
        with pytest.raises(InvalidInput):
            t.compact(expire=timedelta(days=-1))
    finally:
        t.close()
