"""A file whose layout moves on as it grows: an OpenHands `output.jsonl` gets a run appended,
and `main` names the last run. Importing it again lays the session out as a fresh import of
the whole file does (`main` on the new run, the run it named on a branch of its own), never
beside it as `main-imported`, and no entry ever leaves the refs (formats/_common.safe_refs).
The real fixture's runs, given fresh instance ids to make more of them.
"""

import json
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples, run_cli

from ctape import Tape
from ctape.formats import import_files
from ctape.formats._common import is_ancestor

OUTPUT = Path(__file__).parent / "fixtures" / "transcripts" / "openai-chat" / "All-Hands-AI__OpenHands__multi_swe_bench_examples_output.jsonl"
RUNS = [x for x in OUTPUT.read_bytes().splitlines() if x.strip()]


def run_line(i: int) -> bytes:
    """The fixture's runs, again and again, each with an instance id and a first message of its own."""
    d = json.loads(RUNS[i % len(RUNS)])
    d["instance_id"] = f"{d['instance_id']}-{i}"
    for ev in d["history"]:
        if ev.get("action") == "message" and isinstance(ev.get("args"), dict):
            ev["args"] = dict(ev["args"], content=f"run {i}: {ev['args'].get('content', '')}")
            break
    return json.dumps(d).encode()


def refs(tape, name) -> dict:
    return dict(tape.session(name).refs().branches)


def fresh_layout(tmp_path, path) -> dict:
    with Tape.init(tmp_path / "fresh", cache_dir=tmp_path / "fresh-cache") as t:
        import_files(t, "openai", [str(path)], "oh")
        out = refs(t, "oh")
    for p in (tmp_path / "fresh", tmp_path / "fresh-cache"):
        shutil.rmtree(p)
    return out


def test_a_run_appended_moves_main_to_it(tape_dir, tmp_path):
    path = tmp_path / "output.jsonl"
    path.write_bytes(b"\n".join(RUNS[:2]) + b"\n")
    p = run_cli("--dir", tape_dir, "import", "openai", path, "-s", "oh")
    assert p.returncode == 0
    with Tape.open(tape_dir) as t:
        before = refs(t, "oh")
    with path.open("ab") as f:
        f.write(RUNS[2] + b"\n")
    p = run_cli("--dir", tape_dir, "import", "openai", path, "-s", "oh")
    err = p.stderr.decode()
    assert p.returncode == 0 and "-imported" not in err, err
    assert "moved branch main to the imported one: the entry it named is on branch run-" in err
    with Tape.open(tape_dir) as t:
        after = refs(t, "oh")
    assert after == fresh_layout(tmp_path, path)
    assert after["main"] != before["main"] and before["main"] in after.values()  # the run main named kept its tip
    p = run_cli("--dir", tape_dir, "import", "openai", path, "-s", "oh")
    assert p.returncode == 0 and p.stderr.decode().startswith("nothing new"), p.stderr


def test_main_with_entries_of_its_own_stays(tape_dir, tmp_path):
    """An agent went on from the imported run on main: main names no run of the file any
    more, so the new run goes beside it, as before."""
    path = tmp_path / "output.jsonl"
    path.write_bytes(b"\n".join(RUNS[:2]) + b"\n")
    with Tape.open(tape_dir) as t:
        import_files(t, "openai", [str(path)], "oh")
        own = t.session("oh").append("user", {"content": "and now?"}).hash
    with path.open("ab") as f:
        f.write(RUNS[2] + b"\n")
    with Tape.open(tape_dir) as t:
        import_files(t, "openai", [str(path)], "oh")
        after = refs(t, "oh")
    assert after["main"] == own
    assert after["main-imported"] == fresh_layout(tmp_path, path)["main"]


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.one_of(st.integers(1, 3), st.just("own")), min_size=1, max_size=6))
def test_a_growing_output_converges_on_a_fresh_import_and_loses_no_tip(tmp_path_factory, steps):
    """Steps: append 1-3 runs to the file and import it, or append an entry of one's own on
    main. After each import: every tip any branch held is still on a branch (or behind
    one); and when nobody wrote on main since the last import, the branches are those a
    fresh import of the whole file gives."""
    tmp = tmp_path_factory.mktemp("grow")
    path = tmp / "output.jsonl"
    path.write_bytes(b"")
    n, own_since = 0, False
    held: set = set()
    with Tape.init(tmp / "t", cache_dir=tmp / "cache") as t:
        for step in steps:
            if step == "own":
                if t.session("oh").exists():
                    t.session("oh").append("user", {"content": f"own {n}"})
                    own_since = True
                continue
            with path.open("ab") as f:
                for _ in range(step):
                    f.write(run_line(n) + b"\n")
                    n += 1
            import_files(t, "openai", [str(path)], "oh")
            now = refs(t, "oh")
            held |= set(refs(t, "oh").values())
            for h in held:
                assert any(h == tip or is_ancestor(t, h, tip) for tip in now.values()), h
            if not own_since:  # (after an own entry, main keeps it: the runs go beside it)
                assert now == fresh_layout(tmp, path)
