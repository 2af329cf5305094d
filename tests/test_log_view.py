"""Session.view(): HEAD, its branch, named refs, refs at some entries and the conflict
branches resolved from their own claims, not every branch (issue 25: `status` and `log
-n 20` of a session of 300,000 roots resolved 300,000 branches). Whatever it leaves out,
what it holds must be what refs() has: checked after every operation of the sync model's
random sequences (several writers, conflicts, deletions, compaction)."""

from __future__ import annotations

import pytest

import test_sync_model as model
from conftest import run_cli
from ctape import Tape
from ctape.model.refs import TAG


def same_as_full(d: str) -> int:
    """Check every session's views on a fresh opening of copy `d`; returns views checked."""
    checked = 0
    with Tape.open(d) as t:
        names = t.store.sessions()
        for n in names:
            t.store.refresh(n)  # as refs() and view() do first
        full = {n: t.session(n)._load_refs() for n in names}
        hashes = sorted({h for st in full.values() for h in [*st.branches.values(), *st.tags.values()]})
        for n in names:
            st = full[n]
            asks = [((), ()), (sorted(st.branches)[:2], ()), ((), hashes[:3]), ([TAG + x for x in st.tags], hashes[-2:])]
            for refs, values in asks:
                t.store.refs_cache.clear()
                v = t.session(n).view(refs, values)
                assert (v.head, v.branch, v.head_hash, v.conflicts) == (st.head, st.branch, st.head_hash, st.conflicts), (n, refs, values)
                assert all(st.branches.get(b) == h for b, h in v.branches.items()), (n, v.branches, st.branches)
                assert all(st.tags.get(x) == h for x, h in v.tags.items())
                for b in refs:
                    assert v.branches.get(b) == st.branches.get(b) and (not b.startswith(TAG) or v.tags.get(b[len(TAG):]) == st.tags.get(b[len(TAG):]))
                for b, h in st.branches.items():
                    if h in values or b in st.conflicts or b == st.branch:
                        assert v.branches.get(b) == h, (n, b)
                for x, h in st.tags.items():
                    if h in values:
                        assert v.tags.get(x) == h
                checked += 1
    return checked


class CheckedWorld(model.World):
    checked = 0

    def run_op(self, name: str, i: int) -> None:
        super().run_op(name, i)
        for j, d in enumerate(self.dirs):
            if name in ("sync", "live_sync") or j == i:
                CheckedWorld.checked += same_as_full(d)


@pytest.mark.skipif(not model.shutil.which("rsync"), reason="rsync is not installed (.ci/run installs it)")
def test_views_agree_with_the_whole_refs_through_random_syncs(tmp_path):
    CheckedWorld.checked = 0
    for seed in range(6):
        root = tmp_path / f"seq{seed}"
        root.mkdir()
        model.run_sequence(seed, str(root), cli=False, world=CheckedWorld)
    assert CheckedWorld.checked > 100


def test_status_and_log_of_many_roots_read_few_refs(tape_dir, tmp_path):
    """A Claude Code transcript whose every line has "parentUuid": null: each line a root
    and a branch. `status`, `log -n` and `show` of HEAD read HEAD's claims, not all."""
    import json

    src = tmp_path / "roots.jsonl"
    src.write_text("".join(json.dumps({"type": "user", "uuid": f"u{i}", "parentUuid": None, "sessionId": "s",
                                       "timestamp": f"2026-01-01T00:00:{i % 60:02d}Z",
                                       "message": {"role": "user", "content": f"line {i}"}}) + "\n" for i in range(300)))
    run_cli("--dir", tape_dir, "import", "claude-code", str(src), "-s", "s", check=True)
    with Tape.open(tape_dir) as t:
        st = t.session("s").refs()
        assert len(st.branches) == 300
        head = st.head_hash
        t.store.refs_cache.clear()
        rows = []
        real = t.store.index.claims
        t.store.index.claims = lambda s: rows.append(s) or real(s)  # every claim of a session
        assert t.session("s").status()["head"] == head
        assert t.resolve("s") == head and t.session("s").head.hash == head
        assert t.sessions()[0]["head"] == head
        assert rows == []
    out = run_cli("--dir", tape_dir, "log", "-n", "3", "--oneline", "-s", "s", check=True).stdout.decode()
    assert out.startswith(head[:12] + " (HEAD -> main) user") and len(out.splitlines()) == 1


def test_an_import_leaves_keyframes_so_status_reads_little(tape_dir):
    """An import writes keyframes as appends do: the first `status` after it folds at most
    KEY_EVERY entries, not the whole history, and finds what a fold from the root finds."""
    import pathlib

    from ctape.history import derived

    src = pathlib.Path("/work/shared/fixtures/transcripts/claude-code/daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl")
    run_cli("--dir", tape_dir, "import", "claude-code", str(src), "-s", "s", check=True)
    with Tape.open(tape_dir) as t:
        st = t.session("s").refs()
        tips = [st.head_hash, *st.branches.values()]
        assert t.read_entry(st.head_hash).seq > derived.KEY_EVERY
        reads = []
        real = t.read_entry
        t.read_entry = lambda h: reads.append(h) or real(h)
        for tip in tips:
            reads.clear()
            got = t.derived(tip)
            assert len(reads) <= derived.KEY_EVERY + 1, len(reads)
            assert got == derived.derive(tip, real, lambda h: None, lambda h, d: None)
