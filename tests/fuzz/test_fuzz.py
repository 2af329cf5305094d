"""Fuzz harness (issue 17): hypothesis over the decoders of segments and packs, the record
and entry decoders, whole tapes, and each importer, from a seed corpus of real tapes
(tests/fuzz/corpus, tests/fixtures/tapes) and real transcripts (tests/fixtures/transcripts).

Any exception other than CtapeError is a failure (a user would see "internal error").

In the suite each target runs a few dozen examples, derandomized, well under 30 s in all.
By hand, for a long run (random seeds, N examples per target):

    CTAPE_FUZZ_EXAMPLES=20000 PYTHONPATH=. python -m pytest -q -p no:cacheprovider tests/fuzz

CTAPE_FUZZ_REPORT=FILE appends one line per target with the number of inputs it ran, and
one line per distinct crash (exception type and the innermost ctape function); inputs
that crashed are saved under CTAPE_FUZZ_CRASHES (default: a temporary folder). With
CTAPE_FUZZ_KEEP_GOING=1 a crash is recorded and the run goes on (to find every distinct
crash in one long run); otherwise the first unknown crash fails the target, unshrunk.

KNOWN lists crashes found here in code this harness does not fix, each with the
xfail(strict=True) test that reproduces it: the harness tolerates them, and whoever fixes
one removes its line (the xfail test then fails as XPASS until its mark goes too).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import tempfile
import traceback

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import fuzzing
from ctape import Tape
from ctape.store import framing, packing
from ctape.model import schema
from ctape.model.canonical import internalize
from ctape.errors import CtapeError
from ctape.model.models import Entry
from ctape.history import derived
from ctape.model.refs import RefState

LONG = int(os.environ.get("CTAPE_FUZZ_EXAMPLES", "0"))
# whole tapes and imports cost a tape each: by default a fiftieth of the others in long runs
LONG_SLOW = int(os.environ.get("CTAPE_FUZZ_SLOW_EXAMPLES", "0")) or LONG // 50
KEEP_GOING = os.environ.get("CTAPE_FUZZ_KEEP_GOING") == "1"
CRASH_DIR = os.environ.get("CTAPE_FUZZ_CRASHES") or tempfile.mkdtemp(prefix="ctape-fuzz-crashes-")
COUNTS: dict[str, int] = {}
CRASHES: dict[tuple, int] = {}

# (exception type, file, function) of crashes in code outside this harness's reach, with
# the test that reproduces each: none known now (the 21 signatures of the first long run
# are fixed; their reproductions are in tests/test_hostile_records.py)
KNOWN: dict[tuple, str] = {}


def examples(suite: int, slow: bool = False) -> settings:
    return settings(
        max_examples=((LONG_SLOW if slow else LONG) or suite) if LONG or LONG_SLOW else suite,
        deadline=None,
        derandomize=not (LONG or LONG_SLOW),
        database=None,
        phases=(Phase.explicit, Phase.generate),  # no shrinking: a fuzz input is kept as found
        suppress_health_check=list(HealthCheck),
    )


def count(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1
    report = os.environ.get("CTAPE_FUZZ_REPORT")
    if report and COUNTS[name] % 500 == 0:  # a long run shows how far it got, even if stopped
        with open(report + ".progress", "w") as f:
            f.write("".join(f"{k} {v}\n" for k, v in sorted(COUNTS.items())))
            f.write("".join(f"CRASH {' '.join(sig)} x{n}\n" for sig, n in sorted(CRASHES.items())))


def signature(e: BaseException) -> tuple:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f"{os.sep}ctape{os.sep}" in f.filename]
    where = frames[-1] if frames else traceback.extract_tb(e.__traceback__)[-1]
    return (type(e).__name__, os.path.basename(where.filename), where.name)


def guard(target: str, fn, *args, data: bytes = b"") -> None:
    """Run fn; a CtapeError is an answer, anything else a crash (recorded, saved, raised
    unless known or keep-going)."""
    try:
        fn(*args)
    except CtapeError:
        pass
    except Exception as e:
        sig = signature(e)
        CRASHES[sig] = CRASHES.get(sig, 0) + 1
        if CRASHES[sig] == 1:
            os.makedirs(CRASH_DIR, exist_ok=True)
            name = f"{target}-{'-'.join(sig)}-{hashlib.sha1(data).hexdigest()[:8]}".replace(" ", "_")
            with open(os.path.join(CRASH_DIR, name), "wb") as f:
                f.write(data)
            with open(os.path.join(CRASH_DIR, name + ".txt"), "w") as f:
                f.write("".join(traceback.format_exception(e)))
        if sig not in KNOWN and not KEEP_GOING:
            raise


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    path = os.environ.get("CTAPE_FUZZ_REPORT")
    if path:
        with open(path, "a") as f:
            for name, n in sorted(COUNTS.items()):
                f.write(f"{name} {n}\n")
            for sig, n in sorted(CRASHES.items()):
                f.write(f"CRASH {' '.join(sig)} x{n}{' (known)' if sig in KNOWN else ''} in {CRASH_DIR}\n")


SEED = st.integers(0, 2 ** 64 - 1)  # of a random.Random that makes every mutation (fuzzing.py)
SEEDS = fuzzing.tape_seeds()
BLOCKS = fuzzing.block_contents(SEEDS)
BODIES = fuzzing.json_bodies(SEEDS)


def mutated_body(rng: random.Random, kind: str) -> bytes:
    body = rng.choice(BODIES[kind])
    return fuzzing.mutated_json(rng, body) if rng.random() < 0.8 else fuzzing.mutated_bytes(rng, body)


def test_the_seeds_are_there():
    kinds = {k for k, _ in SEEDS}
    assert kinds == {"seg", "pack"} and BLOCKS and all(BODIES.values()), {k: len(v) for k, v in BODIES.items()}


# -- decoders of segments and packs -----------------------------------------------------------------


@examples(150)
@given(SEED)
def test_fuzz_framing_scan(seed):
    rng = random.Random(seed)
    buf = fuzzing.mutated_file(rng, rng.choice(SEEDS)[1])
    count("framing.scan")

    def run():
        end = 0
        for item in framing.scan(buf):
            assert item.offset >= end  # always forward: no loop, no overlap
            end = item.end if isinstance(item, framing.Record) else item.offset + 1

    guard("scan", run, data=buf)


@examples(150)
@given(SEED)
def test_fuzz_decode_block(seed):
    rng = random.Random(seed)
    content = fuzzing.mutated_block(rng, rng.choice(BLOCKS))
    count("packing.decode_block")
    guard("block", packing.decode_block, content, "fuzz", data=content)


# -- record and entry decoders ---------------------------------------------------------------------------


@examples(150)
@given(SEED)
def test_fuzz_ref_records(seed):
    """A ref record the schema accepts goes through everything that consumes one."""
    body = mutated_body(random.Random(seed), "ref")
    count("ref records")

    def run():
        rec, why = schema.read_ref_record(body)
        assert (rec is None) != (why is None)
        if rec is None:
            return
        from ctape.store.index import IndexBatch

        IndexBatch().add_ref(rec)
        st_ = RefState()
        st_.apply(rec)
        st_.resolve_all()
        st_.head_hash

    guard("ref", run, data=body)


@examples(150)
@given(SEED)
def test_fuzz_partial_records_and_headers(seed):
    rng = random.Random(seed)
    kind = rng.choice(["partial", "header"])
    body = mutated_body(rng, kind)
    count("partial records and headers")

    def run():
        if kind == "partial":
            rec, why = schema.read_partial_record(body)
            if rec is not None:
                from ctape.store.index import IndexBatch

                IndexBatch().add_partial(rec, body)
        else:
            schema.read_header(body)

    guard(kind, run, data=body)


@examples(150)
@given(SEED)
def test_fuzz_entry_bodies(seed):
    """An entry body the schema accepts can be internalized, built and folded into state."""
    body = mutated_body(random.Random(seed), "entry")
    count("entry bodies")
    h = "0" * 64

    def run():
        raw = schema.decode_entry(h, body)
        get = lambda b: "blob text"  # noqa: E731
        e = Entry(h, raw["parent"], raw["seq"], raw["kind"], raw["time"], internalize(raw["payload"], get), internalize(raw["meta"], get), internalize(raw["delta"], get))
        derived.step(derived.step(derived.empty(), e), e)
        e.to_json()

    guard("entry", run, data=body)


# -- whole tapes: a mutated file among real ones, read by every command's library call ------------------------------------


def _read_everything(root: str, target: str, data: bytes) -> None:
    from ctape.formats import export_ref

    t = Tape.open(root)
    try:
        for call in (t.sessions, t.fsck, t.stats):
            guard(target, call, data=data)
        try:
            names = t.store.sessions()
        except CtapeError:
            names = []
        for name in names:
            s = t.session(name)
            for call in (s.refs, s.status, s.reflog, s.state, s.branches, lambda: list(s.log(limit=200)), lambda: s.context(format="openai"), lambda: s.context(format="anthropic")):
                guard(target, call, data=data)
            for fmt in ("jsonl", "claude-code"):
                guard(target, lambda: list(export_ref(t, name, fmt)), data=data)
    finally:
        t.close()


def _compact(root: str) -> None:
    t = Tape.open(root)
    try:
        t.compact(grace="now")
    finally:
        t.close()


@examples(8, slow=True)
@given(SEED)
def test_fuzz_whole_tape(seed):
    rng = random.Random(seed)
    kind, data = rng.choice(SEEDS)
    buf = fuzzing.mutated_file(rng, data)
    count("whole tapes")
    tmp = tempfile.mkdtemp(prefix="ctape-fuzz-")
    try:
        root = os.path.join(tmp, "t")
        Tape.init(root).close()
        os.environ["CTAPE_CACHE_DIR"] = os.path.join(tmp, "cache")
        folder = os.path.join(root, "sessions", "chat")
        os.makedirs(folder)
        name = "pack-" + "0" * 32 + ".pack" if kind == "pack" else "fuzzseed0001-00000000000000000001.seg"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(buf)
        _read_everything(root, "tape", buf)
        if rng.random() < 0.5:
            guard("tape", _compact, root, data=buf)
            _read_everything(root, "tape", buf)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- importers: mutated real transcript lines --------------------------------------------------------------------------


def _import_and_read(fmt: str, text: bytes) -> None:
    from ctape.formats import export_ref, import_files

    tmp = tempfile.mkdtemp(prefix="ctape-fuzz-")
    try:
        root = os.path.join(tmp, "t")
        Tape.init(root).close()
        os.environ["CTAPE_CACHE_DIR"] = os.path.join(tmp, "cache")
        src = os.path.join(tmp, "in.jsonl")
        with open(src, "wb") as f:
            f.write(text)
        target = f"import-{fmt}"
        t = Tape.open(root)
        try:
            imported = []
            guard(target, lambda: imported.append(import_files(t, fmt, [src], "imp")), data=text)
            if not imported:
                return
            for out_fmt in (fmt, "jsonl"):
                dump = []
                guard(target, lambda: dump.append("\n".join(export_ref(t, "imp", out_fmt)) + "\n"), data=text)
                if not dump:
                    continue
                # an export imports again
                back = os.path.join(tmp, f"back.{out_fmt}")
                with open(back, "w", encoding="utf-8", errors="surrogateescape") as f:
                    f.write(dump[0])
                guard(target, import_files, t, out_fmt, [back], "again" if out_fmt == fmt else "copy", data=text)
        finally:
            t.close()
        _read_everything(root, target, text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("fmt", ["claude-code", "codex", "openai"])
def test_fuzz_importer(fmt):
    seeds = fuzzing.transcript_seeds(fmt)
    assert seeds

    @examples(4, slow=True)
    @given(SEED)
    def run(seed):
        rng = random.Random(seed)
        text = fuzzing.mutated_transcript(rng, rng.choice(seeds))
        count(f"import {fmt}")
        _import_and_read(fmt, text)

    run()
