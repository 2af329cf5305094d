"""Media parts of a message: an image, a document (PDF, plain text...), audio or video, in
any of the shapes the transcripts and integrations write: Chat Completions (`image_url`,
`input_audio`, `file`), Responses (`input_image`, `input_file`), Anthropic (`image` and
`document` with a source), LangChain's standard blocks (`image` / `audio` / `video` /
`file` / `text-plain`, v0 with `source_type` and v1 with `url` / `base64` / `file_id`),
pydantic-ai's serialized parts (`image-url`, `document-url`, `audio-url`, `video-url`,
`binary`, `uploaded-file`).

`media_of` reads a part into a `Media`; `openai_part` and `anthropic_part` give each view
the part its API has for it, and `left_out` the note where it has none: never the part's
JSON, never base64 as text. The views themselves are in ops/context.py.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class Media:
    kind: str  # image | document | audio | video
    media_type: Optional[str] = None
    url: Optional[str] = None  # where the file is (never a data: URL: that is `data`)
    data: Optional[str] = None  # the file, base64
    text: Optional[str] = None  # a plain-text document's text
    file_id: Optional[str] = None  # a file kept by a provider (its Files API)
    name: Optional[str] = None


TEXT_PARTS = ("text", "input_text", "output_text")  # a text part's types: Chat Completions and Anthropic, Responses in and out
PAI_URL_KINDS = {"image-url": "image", "document-url": "document", "audio-url": "audio", "video-url": "video"}
LC_KINDS = ("image", "audio", "video", "file", "text-plain")


def _str(d: dict, key: str) -> Optional[str]:
    v = d.get(key)
    return v if isinstance(v, str) and v else None


def _kind_of(media_type: Optional[str], default: str = "document") -> str:
    top = (media_type or "").split("/", 1)[0]
    return top if top in ("image", "audio", "video") else default


def _located(kind: str, url: str, media_type: Optional[str] = None, name: Optional[str] = None) -> Media:
    """A Media at URL; a data: URL is its base64 data."""
    if url.startswith("data:") and ";base64," in url:
        mt, data = url[5:].split(";base64,", 1)
        return Media(kind, mt or media_type, data=data, name=name)
    return Media(kind, media_type, url=url, name=name)


def media_of(p: Any) -> Optional[Media]:
    """The media part P describes, None when it is no media part. An image part that holds
    neither data, a URL nor a file id is a Media with none of them (the NO_IMAGE note)."""
    if not isinstance(p, dict):
        return None
    t = p.get("type")
    if t is None and isinstance(p.get("kind"), str):  # pydantic-ai (its parts have a `kind`, no `type`)
        k, mt = p["kind"], _str(p, "media_type")
        if k in PAI_URL_KINDS and _str(p, "url"):
            return _located(PAI_URL_KINDS[k], p["url"], mt)
        if k == "binary" and isinstance(p.get("data"), str):
            return Media(_kind_of(mt), mt, data=p["data"])
        if k == "uploaded-file" and _str(p, "file_id"):
            return Media(_kind_of(mt), mt, file_id=p["file_id"])
        return None
    if t in ("image_url", "input_image"):  # Chat Completions, Responses
        u = p.get("image_url")
        u = u.get("url") if isinstance(u, dict) else u
        if isinstance(u, str) and u:
            return _located("image", u)
        return Media("image", file_id=_str(p, "file_id"))
    if t in ("image", "document") and isinstance(p.get("source"), dict):  # Anthropic
        src, name = p["source"], _str(p, "title")
        st, mt = src.get("type"), _str(src, "media_type")
        if st == "base64" and isinstance(src.get("data"), str):
            return Media(t, mt, data=src["data"], name=name)
        if st == "url" and _str(src, "url"):
            return _located(t, src["url"], mt, name)
        if st == "text" and isinstance(src.get("data"), str):
            return Media("document", mt or "text/plain", text=src["data"], name=name)
        return Media(t, mt, file_id=_str(src, "file_id"), name=name)
    if t == "file" and isinstance(p.get("file"), dict):  # Chat Completions
        f = p["file"]
        name = _str(f, "filename")
        if _str(f, "file_data"):
            m = _located("document", f["file_data"], name=name)
            return Media(_kind_of(m.media_type), m.media_type, data=m.data, url=m.url, name=name)
        return Media("document", file_id=_str(f, "file_id"), name=name)
    if t == "input_file":  # Responses
        name = _str(p, "filename")
        if _str(p, "file_data"):
            fd = p["file_data"]
            m = _located("document", fd, name=name) if fd.startswith("data:") else Media("document", data=fd, name=name)
            return Media(_kind_of(m.media_type), m.media_type, data=m.data, url=m.url, name=name)
        if _str(p, "file_url"):
            return _located("document", p["file_url"], name=name)
        return Media("document", file_id=_str(p, "file_id"), name=name)
    if t == "input_audio" and isinstance(p.get("input_audio"), dict):  # Chat Completions
        a = p["input_audio"]
        fmt = _str(a, "format")
        return Media("audio", f"audio/{fmt}" if fmt else None, data=_str(a, "data"))
    if t in LC_KINDS:  # LangChain's standard blocks: v0 (`source_type`) and v1
        mt = _str(p, "mime_type")
        kind = t if t in ("image", "audio", "video") else _kind_of(mt)
        extras = [d for d in (p.get("extras"), p.get("metadata")) if isinstance(d, dict)]
        name = _str(p, "filename") or _str(p, "title") or next((_str(d, "filename") for d in extras if _str(d, "filename")), None)
        st = p.get("source_type")
        if t == "text-plain" and isinstance(p.get("text"), str):
            return Media("document", mt or "text/plain", text=p["text"], name=name)
        if st == "text" and isinstance(p.get("url"), str):  # v0: the text is under `url`
            return Media("document", mt or "text/plain", text=p["url"], name=name)
        if st in ("url", None) and _str(p, "url"):
            return _located(kind, p["url"], mt, name)
        data = _str(p, "data") if st == "base64" else _str(p, "base64") if st is None else None
        if data:
            return Media(kind, mt, data=data, name=name)
        file_id = _str(p, "id") if st == "id" else _str(p, "file_id") if st is None else None
        if file_id or t == "image":
            return Media(kind, mt, file_id=file_id, name=name)
    return None


def is_image(p: Any) -> bool:
    m = media_of(p)
    return m is not None and m.kind == "image"


def image_url(p: Any) -> Optional[str]:
    """The URL of an image part (a data: URL for inline data), None when P is no image part
    or holds neither data nor a URL."""
    m = media_of(p)
    return image_url_of(m) if m is not None else None


def image_url_of(m: Media) -> Optional[str]:
    if m.kind != "image":
        return None
    return m.url or (f"data:{m.media_type or 'image/png'};base64,{m.data}" if m.data else None)


def plain_text(m: Media) -> Optional[str]:
    """A text document's text (base64 data of a text/* type decoded), None for any other."""
    if m.text is not None:
        return m.text
    if m.data and (m.media_type or "").startswith("text/"):
        try:
            return base64.b64decode(m.data, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None
    return None


OPENAI_AUDIO = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def openai_part(m: Media) -> dict:
    """The Chat Completions part for a media part of a user message, or the note that
    stands for it (an image URL it cannot fetch is still sent: the API says so)."""
    url = image_url_of(m)
    if url:
        return {"type": "image_url", "image_url": {"url": url}}
    text = plain_text(m) if m.kind == "document" else None
    if text is not None:
        return {"type": "text", "text": f"[document {m.name}]\n{text}" if m.name else text}
    if m.kind == "document" and m.data and m.media_type == "application/pdf":
        return {"type": "file", "file": {"filename": m.name or "document.pdf", "file_data": f"data:application/pdf;base64,{m.data}"}}
    if m.kind == "audio" and m.data and m.media_type in OPENAI_AUDIO:
        return {"type": "input_audio", "input_audio": {"data": m.data, "format": OPENAI_AUDIO[m.media_type]}}
    return {"type": "text", "text": left_out(m, "Chat Completions")}


def anthropic_part(m: Media, user: bool = True) -> dict:
    """The Messages API block for a media part: an image block (a user message or a tool
    result), a document block (a user message), else the note that stands for it."""
    url = image_url_of(m)
    if url:
        return anthropic_image(url)
    text = plain_text(m) if m.kind == "document" and user else None
    if text is not None:
        block: dict = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
    elif m.kind == "document" and user and m.media_type == "application/pdf" and m.data:
        block = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": m.data}}
    elif m.kind == "document" and user and m.url and (m.media_type == "application/pdf" or m.url.lower().split("?")[0].endswith(".pdf")):
        block = {"type": "document", "source": {"type": "url", "url": m.url}}
    else:
        return {"type": "text", "text": left_out(m, "the Messages API" if user else None)}
    if m.name:
        block["title"] = m.name
    return block


def left_out(m: Media, api: Optional[str] = None) -> str:
    """The short note a view writes for a media part it does not send: what it was (kind,
    name, type, size, URL or file id), never its data. API: the API that takes no such
    part in a user message; None: the part is outside one, where the API takes text."""
    if m.kind == "image" and not (m.url or m.data or m.file_id):
        return NO_IMAGE
    about = ", ".join(x for x in (m.name, m.media_type, f"{len(m.data) * 3 // 4 - m.data[-2:].count('='):,} bytes" if m.data else None) if x)
    desc = m.kind + (f" ({about})" if about else "") + (f" at {m.url}" if m.url else "") + (f", file id {m.file_id}" if m.file_id else "")
    if m.file_id and not (m.url or m.data or m.text is not None):
        why = "a file id names a file at the provider that stored it"
    elif api is None:
        why = "only a user message takes it"
    else:
        why = f"{api} takes no such {m.kind}"
    return f"[{desc}: left out, {why}]"


NO_IMAGE = "[image: the transcript keeps no data for it]"


def anthropic_image(url: str) -> dict:
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}
