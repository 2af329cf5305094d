"""What may not go up: the check of the files a push would upload, before anything leaves.

Likely secrets neither redacted nor allowed (SPEC section 18), in entries, in the text of
interrupted streams and in the names of sessions and refs; redacted values whose bytes are
still in this copy's files; records that fail their checks (they cannot be checked, and
would reach every clone). What it finds holds back the session it is in (HeldBack,
SecretsFound); push (ctape/sync/push.py) decides what goes up around that.
"""

from __future__ import annotations

from typing import Optional

from ..model.errors import CtapeError
from ..model.models import plural
from ..store import framing
from ..store.files import CODEC_RAW
from .remote import State


class HeldBack(CtapeError):
    """`push` of sessions that cannot go up as they are: every one with something to send
    was held back (damage, or SecretsFound), or some were and the rest went up. `held`:
    session -> why, when the refusal names them (push --json prints them)."""

    def __init__(self, message: str = "", held: Optional[dict] = None):
        super().__init__(message)
        self.held = held or {}


class SecretsFound(HeldBack):
    """`push` of sessions with likely secrets that were neither redacted nor allowed."""


def _redacted_bytes_left(tape, sessions: list[str]) -> list[str]:
    """Redacted objects whose original bytes still sit in a file that this push would
    upload (a session's own files, or packs/): the redaction hides them from reads at once,
    but only the next `compact` removes them from the files (docs/privacy.md)."""
    from ..store.store import TYPE_WITHHELD

    store = tape.store
    prefixes = tuple(f"sessions/{s}/" for s in sessions) + ("packs/",)
    left = []
    for h in tape.redactions():
        loc = store.index.find_object(h)  # one file per object: check_secrets also reads the files
        if loc is None or not (store.index.path_of(loc[0]) or "").startswith(prefixes):
            continue  # gone (a value dropped whole), or in a file this push does not send
        try:
            type_, _ = store.get_object(h)
        except CtapeError:
            continue
        if type_ != TYPE_WITHHELD:
            left.append(h)
    return left


def _redactions_not_pulled(tape, state: State) -> list[str]:
    """Objects a compaction of the remote removed as redacted (its manifest says so) that
    this copy holds without their redaction: it was made on another copy and not pulled
    here. Uploaded, they would put the secret back on the remote (a copy that holds a
    deleted file compacts and pushes its pack). Held anywhere in this copy, whichever
    sessions are pushed: the index names one file per object, and two copies that wrote
    the same value in two sessions each hold it in both sessions' files after a sync."""
    if not state["redacted"]:
        return []
    store = tape.store
    known = tape.redactions()
    return sorted(h for h in state["redacted"] if h not in known and store.has_object(h))


def _bytes_left_error(left: list[str]) -> SecretsFound:
    return SecretsFound(
        f"not pushing: {len(left)} redacted {plural(len(left), 'value still has its', 'values still have their')} bytes in this copy's files "
        f"(first: {left[0][:12]}); run `ctape compact` first (it drops them), or push with --allow-secrets")


def check_secrets(tape, sessions: list[str], allow_secrets: bool, files: Optional[list[tuple[str, str]]] = None,
                  compacting_first: bool = False) -> Optional[dict[str, int]]:
    """Refuse to upload likely secrets that were neither redacted nor allowed (SPEC section
    18), or redacted values whose bytes are still in the files to upload, with one line
    that names them and says how to go on, unless `allow_secrets`. What is checked is
    every entry of the files this push uploads (`files`: (session, file name); None: every
    file of the sessions): an entry the remote already holds was checked, or allowed, when
    it went up, so a push after one append reads one small file, not the whole history
    (the scan cache answers for entries seen before). Returns, per file, the end of the
    last whole record read: the push uploads no byte past it (an append to this copy's own
    segment that lands after the check is checked when push reads the file, under its
    lock; see push); None with `allow_secrets`. `compacting_first`: the push compacts this
    copy before it uploads, which takes out the bytes of redacted values, so those are not
    refused here (they were, with "run `ctape compact` first": a step the push was about to
    take; found by an audit) and the check after the compaction looks for them again."""
    if allow_secrets:
        return None
    left = [] if compacting_first else _redacted_bytes_left(tape, sessions)
    if left:
        raise _bytes_left_error(left)
    from ..ops.scan import scan_entries
    from ..store.files import TYPE_BLOB, TYPE_ENTRY
    from ..store.store import TYPE_WITHHELD

    store = tape.store
    if files is None:
        files = [(s, rel.rsplit("/", 1)[1]) for s in sessions for rel in store.list_files(s) if rel.startswith(f"sessions/{s}/")]
    ends: dict[str, int] = {}
    blobs: dict[str, bytes] = {}  # large values read on the way, for the entries after them
    streams: dict[tuple[str, str], list[tuple[int, str]]] = {}  # partial records: the text of streams
    recorded: dict[tuple[str, str], set[str]] = {}  # stream -> the entries the ref record that ended it set
    # a redacted object in its original form in a file to upload, wherever the index places
    # it: two copies that wrote the same value in two sessions each hold it in both
    # sessions' files after a sync, and a file rsync brought may hold what this copy's
    # compaction already withheld elsewhere (the index then names the withheld form)
    redacted = tape.redactions()
    left: set[str] = set()
    names: dict[str, set[str]] = {}  # session -> the ref names the records to upload hold
    uploaded: dict[str, str] = {}  # large value -> the session whose file to upload holds it
    referred: set[str] = set()  # the large values the entries to upload refer to
    damaged: dict[str, str] = {}  # session -> a file to upload with a record that fails its checks

    def items():
        # each entry with its record as the file holds it: the check reads every file once
        seen: set[str] = set()
        for s, file in files:
            try:
                for rec in store.scan_file(f"sessions/{s}/{file}", ends=ends):
                    if not isinstance(rec, framing.Record):
                        if not rec.torn:  # what it held cannot be checked (a torn tail is not sent)
                            damaged.setdefault(s, f"sessions/{s}/{file}")
                        continue
                    if rec.type == framing.T_OBJECT and len(rec.body) > 33:
                        h = rec.body[:32].hex()
                        if h in redacted and rec.body[32] != TYPE_WITHHELD:
                            left.add(h)
                        if rec.body[32] == TYPE_BLOB:
                            blobs[h] = rec.body
                            uploaded.setdefault(h, s)
                        elif rec.body[32] in (TYPE_ENTRY, TYPE_WITHHELD) and h not in seen:
                            seen.add(h)
                            referred.update(_value_refs(store, h, rec.body))
                            yield s, h, rec.body
                    elif rec.type in (framing.T_PARTIAL, framing.T_REF):
                        _note_stream(s, rec, streams, recorded, names.setdefault(s, set()))
            except (OSError, CtapeError):
                continue  # a file gone or damaged meanwhile: what it holds is not read here either

    found = scan_entries(tape, items(), blobs)
    if damaged:
        s, path = next(iter(damaged.items()))
        raise HeldBack(_damaged_line(tape, s, path))
    if left and not compacting_first:
        raise _bytes_left_error(sorted(left))
    _check_names(tape, sorted({s for s, _ in files}), names)
    _check_streams(tape, streams, recorded)
    _check_unreferred(tape, {h: s for h, s in uploaded.items() if h not in referred and h not in redacted})
    if found:
        bad = sorted({f.session for f in found})
        first = found[0]
        raise SecretsFound(
            f"not pushing: {len(found)} likely {plural(len(found), 'secret', 'secrets')} in {plural(len(bad), 'session', 'sessions')} {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''} "
            f"(first: {first.kind} in {first.hash[:12]} at {first.path}); {_way_out(tape, first)}")
    return ends


def _value_refs(store, h: str, record: bytes) -> list[str]:
    """The large values an entry's object record refers to (`"\u0000b<hash>"` strings in
    its canonical JSON, as the scan's byte judge finds them: detectors._mask_json)."""
    from ..ops.detectors import _mask_json

    try:
        body = record[34:] if record[33] == CODEC_RAW else store.decode_object(h, record)[1]
    except (CtapeError, ValueError):
        return []
    return _mask_json(body)[1] if b"\\u0000b" in body else []


def _check_unreferred(tape, values: dict[str, str]) -> None:
    """Large values in the files to upload that no entry to upload refers to (`values`: hash
    -> session) are checked on their own: such a value is written before the entry that
    refers to it, so an append killed between the two (or a copy taken then, or a salvage
    that kept the value and lost the block after it) leaves one that no entry, no `scan`
    and no redaction reaches; it went up unchecked (found by an audit). One that an entry
    elsewhere in the session refers to is left to that entry's check (on the remote
    already, or in a later push)."""
    if not values:
        return
    from ..ops.scan import Detectors, Finding, load_settings, preview

    settings = load_settings(tape)
    det, allowed = Detectors(settings["patterns"]), set(settings["allowed"])
    found = []
    for h, s in sorted(values.items(), key=lambda kv: (kv[1], kv[0])):
        try:
            text = tape.store.get_object(h)[1].decode("utf-8", "replace")
        except CtapeError:
            continue
        spans = det.spans(text)
        finds = [f for f in (Finding(s, h, "$", sp[2], preview(text, spans, sp), at=str(sp[0]) if i else "")
                             for i, sp in enumerate(spans)) if f.id not in allowed]
        if finds and not _referred_in(tape, s, h):
            found += finds
    if found:
        f = found[0]
        raise SecretsFound(
            f"not pushing: {len(found)} likely {plural(len(found), 'secret', 'secrets')} in a large value no entry refers to "
            f"(first: {f.kind} in value {f.hash[:12]} of session {shown_name(tape, f.session)}, finding {f.id}: left by an append "
            "that did not finish, or kept by a salvage); `ctape compact --grace now` drops such values from this copy's files, "
            "or `ctape scan --allow ID`, or push with --allow-secrets")


def _referred_in(tape, session: str, value: str) -> bool:
    """Does an entry in any file of the session refer to the large value? (One read of the
    session's files: only for a value with a likely secret that the upload's entries do
    not refer to.)"""
    store = tape.store
    from ..store.files import TYPE_ENTRY

    for rel in store.list_files(session):
        try:
            for rec in store.scan_file(rel):
                if (isinstance(rec, framing.Record) and rec.type == framing.T_OBJECT and len(rec.body) > 33
                        and rec.body[32] == TYPE_ENTRY and value in _value_refs(store, rec.body[:32].hex(), rec.body)):
                    return True
        except (OSError, CtapeError):
            continue
    return False


def _way_out(tape, first) -> str:
    """What resolves a finding: `scan` and `redact --scan` see the entries a session's refs
    reach, but push checks the files, which also hold entries of a removed session or of a
    deleted branch until `compact` drops them (after their ref records expire)."""
    from ..ops.scan import scan

    drop = ("`ctape compact --expire now --grace now` drops it from this copy's files, "
            "or push with --allow-secrets")
    if first.session not in tape.session_names():
        return f"session {first.session} was removed, but its entries stay in the files until compact: {drop}"
    if first.id not in {f.id for f in scan(tape, [first.session])["findings"]}:
        # a redaction of that one value keeps the ref log, which compact --expire now drops
        # whole (found by an audit: `branch -f main main~1` took back an append with a key)
        path = first.path.replace("'", "'\\''")
        return (f"the entry is on no branch of {first.session} (a deleted branch, or one moved back?) and stays in the files "
                f"until compact: `ctape redact {first.hash[:12]} --path '{path}' -s {first.session}` takes the value out, or {drop}")
    return (f"see `ctape scan -s {first.session}`, then `ctape redact --scan -s {first.session}` or `ctape scan --allow ID`, "
            "or push with --allow-secrets")


def shown_name(tape, name: str) -> str:
    """A session name as a message shows it: masked when it looks like a secret (the push
    holds such a session back: _check_names), so that no line or key repeats it."""
    from ..ops.scan import masked

    return masked(tape, name)


def _check_names(tape, sessions: list[str], recorded: dict[str, set[str]]) -> None:
    """Refuse names that look like a secret: a session's name is part of its objects' keys
    on the remote (bucket listings, access logs), and the names of its branches and tags
    are in the ref records that go up (`recorded`: the names in those to upload). Matched
    with the patterns only (no entropy rule: names with a hash in them are common). Scan
    does not look at names and no redaction takes one out: a live name can be replaced by
    another; a removed session's or a deleted ref's name stays in the record of its removal,
    which is what syncs the removal (docs/privacy.md)."""
    from ..ops.scan import Detectors, load_settings, preview

    det = Detectors(load_settings(tape)["patterns"], entropy=False)
    live_sessions = set(tape.session_names())
    gone = ("its name stays in the record of its removal, which syncs the removal: treat the secret as "
            "leaked to every copy this one reached and rotate it, then push with --allow-secrets")
    for s in sessions:
        found = det.pattern_spans(s)
        if found:
            shown = preview(s, found, found[0])
            how = ("copy it under another name (`ctape session cp OLD NEW`), remove it (`ctape session rm OLD`), run "
                   "`ctape compact` (which moves what the copy reads into its own files) and push the copy (-s NEW); "
                   "or push with --allow-secrets") if s in live_sessions else (
                "it was removed, and " + gone + "; or push only the sessions you need (-s NAME) after `ctape compact`, "
                "which moves what they read out of its files")
            raise SecretsFound(f"not pushing: the name of session {shown!r} looks like a secret ({found[0][2]}); {how}")
        st = tape.session(s).refs() if s in live_sessions else None
        live = {**{b: "branch" for b in (st.branches if st else ())}, **{"tag:" + t: "tag" for t in (st.tags if st else ())}}
        for name in sorted(set(live) | recorded.get(s, set())):
            typed = name.startswith(TEXT)  # (text typed into a record, not a ref's name)
            text = name[len(TEXT):] if typed else name
            found = det.pattern_spans(text)
            if found:
                what = live.get(name)
                shown = preview(text, found, found[0])
                if not typed:
                    how = (f"make a {what} of another name at it (`ctape {what} NEW REF -s {s}`) and delete this one, "
                           f"or push with --allow-secrets") if what else (
                        "it was deleted, and its name stays in the record of the deletion (which syncs it) until that record "
                        f"expires: `ctape compact --expire now --grace now` drops it once a later record of session {s} exists (an "
                        "append, a checkout: the newest record of a session is always kept); or treat the secret as leaked "
                        "to every copy this one reached, rotate it, and push with --allow-secrets")
                    raise SecretsFound(f"not pushing: a ref of session {s} is named like a secret ({found[0][2]}): {shown!r}; {how}")
                raise SecretsFound(
                    f"not pushing: the ref log of session {s} holds text that looks like a secret ({found[0][2]}): {shown!r} (the "
                    "name of a deleted ref, a REF typed to `checkout`, the name a session was copied from); `ctape compact --expire "
                    f"now --grace now` drops the ref log's records from this copy's files (`ctape reflog -s {s}` shows them), or {gone}")


# the fields of a ref record that hold text a user typed, beside the names of the refs it
# sets (the keys of `set` and `old`, and HEAD's `@BRANCH`): the REF given to `checkout`, the
# session `session cp` copied. The rest is ctape's own (a watch position's path, a
# redaction's paths and kinds, times): checked, it refused for good every push of a session
# watched from a folder whose name a pattern of the user's matched (found in review)
_TYPED_FIELDS = ("ref", "source")
TEXT = "\0"  # (in `names`: a typed text that is not a ref's name follows)


def _texts_in(rec: dict, out: set) -> None:
    """The names of the refs a ref record sets, and as TEXT + text, HEAD's `@BRANCH` values
    and the typed fields (_TYPED_FIELDS)."""
    for field in ("set", "old"):
        v = rec.get(field)
        if isinstance(v, dict):
            out.update(k for k in v if isinstance(k, str))
            out.update(TEXT + x for x in v.values() if isinstance(x, str) and x.startswith("@"))
    for field in _TYPED_FIELDS:
        if isinstance(rec.get(field), str):
            out.add(TEXT + rec[field])


def _note_stream(session: str, rec, streams: dict, recorded: dict, names: Optional[set] = None) -> None:
    """Keep a partial record's text (an interrupted stream's, in no entry yet), or, from a
    ref record that ended a stream (`recover`, or the stream's own end), the entries it set;
    and in `names`, the text a ref record holds that a user chose (_texts_in)."""
    import json

    try:
        r = json.loads(rec.body)
    except ValueError:
        return
    if names is not None and rec.type == framing.T_REF and isinstance(r, dict):
        _texts_in(r, names)
    if not isinstance(r, dict) or not isinstance(r.get("stream"), str):
        return
    key = (session, r["stream"])
    if rec.type == framing.T_PARTIAL:
        if isinstance(r.get("text"), str) and type(r.get("off")) is int:
            streams.setdefault(key, []).append((r["off"], r["text"]))
    elif isinstance(r.get("set"), dict):
        recorded.setdefault(key, set()).update(v for v in r["set"].values() if isinstance(v, str) and len(v) == 64)


def _check_streams(tape, streams: dict, recorded: dict) -> None:
    """The text of interrupted streams in the bytes to upload (partial records: the text
    that arrived before a crash) is checked like an entry. A stream still open is checked
    whole (every record of it the index knows, so a secret cut by a flush is seen); one that
    ended (recorded as an entry) is left to its entry, unless that entry was redacted: then
    its partial records still hold the text, and only `compact` drops them."""
    from ..ops.scan import Detectors, load_settings, open_stream_pieces, scan_streams

    if not streams:
        return
    red = tape.redactions()
    settings = load_settings(tape)
    allowed = set(settings["allowed"])
    todo: dict[tuple[str, str], list[tuple[int, str]]] = {}
    open_ = {}
    for s in sorted({s for s, _ in streams}):
        open_.update(open_stream_pieces(tape, s))
    for key, pieces in streams.items():
        entries = recorded.get(key, set())
        if key in open_:
            todo[key] = pieces + open_[key]
        elif any(h in red for h in entries):
            raise SecretsFound(
                f"not pushing: the interrupted stream {key[1][:8]} of session {key[0]} was recorded as entry "
                f"{sorted(entries)[0][:12]}, since redacted, and its partial records still hold the text; "
                "run `ctape compact` first (it drops them), or push with --allow-secrets")
        elif not entries:
            todo[key] = pieces  # ended by a record this push does not read: judged by its text
    found = [f for f in scan_streams(todo, Detectors(settings["patterns"])) if f.id not in allowed]
    if found:
        f = found[0]
        from ..history.stream import is_live

        live = is_live(tape.store, f.hash)
        what = "a stream still being written" if live else "an interrupted stream"
        first = "once its writer ends (its text is then an entry), run" if live else f"`ctape recover -s {f.session}` records it as an entry, then"
        raise SecretsFound(
            f"not pushing: {len(found)} likely {plural(len(found), 'secret', 'secrets')} in the text of {what} (first: {f.kind} in "
            f"stream {f.hash[:8]} of session {f.session}, finding {f.id}); {first} `ctape redact --scan -s {f.session}` and "
            "`ctape compact`; or `ctape scan --allow ID`, or push with --allow-secrets")


def _damaged_uploads(tape, todo: list[tuple], read: bool) -> dict[str, str]:
    """Sessions with damaged records in a file this push would upload: those the index knows
    (fsck's damage: a record that fails its checks, or acknowledged bytes lost; a torn tail
    is not: the push sends whole records only), and with `read`, those a reading of the
    files finds (damage that came after they were indexed; without `read`, the secrets
    check reads them and finds it)."""
    store = tape.store
    out: dict[str, str] = {}
    for s in sorted({p[0] for p in todo}):
        files = {f"sessions/{s}/{p[1]}": p[2] for p in todo if p[0] == s}
        bad = [path for path, _ in store.damage(s) if path in files]
        if not bad and read:
            bad = [path for path, start in files.items() if _unreadable(store, path, start)]
        if bad:
            out[s] = _damaged_line(tape, s, bad[0])
    return out


def _unreadable(store, path: str, start: int) -> bool:
    """Damage in what a push would send of a file (from `start`: before it is on the remote)."""
    try:
        return any(isinstance(r, framing.Damage) and not r.torn for r in store.scan_file(path, start))
    except FileNotFoundError:
        return False  # compacted since it was listed: the push sends what replaced it


def _damaged_line(tape, session: str, path: str) -> str:
    name = shown_name(tape, session)
    cut = any(p == path for p, _, _ in tape.store.index.lost_rows())
    path = f"sessions/{name}/{path.rsplit('/', 1)[1]}"
    if cut:  # fsck's "lost acknowledged data": what is left is intact, but the session's history may have lost a claim
        return (f"not pushing session {name}: {path} lost acknowledged records (it is shorter than this copy had read it; "
                "see `ctape fsck`); bring the file back whole from a copy that has it (rsync), or run `ctape fsck --salvage` "
                "to go on without them, then push again")
    return (f"not pushing session {name}: {path} holds damaged records (they cannot be checked for secrets, and would "
            "reach every clone); run `ctape fsck`, and `ctape fsck --salvage` to keep what is intact, then push again")
