"""Every source or test file the docs name exists: format.md named six files by paths they
had before the layout moved them into packages (found by an audit of the docs)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_file_the_docs_name_exists():
    missing = []
    for doc in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        named = set(re.findall(r"\b(ctape/[A-Za-z0-9_./-]+\.py)\b", text))  # (tests/ only in backticks: examples name a user's own)
        named |= set(re.findall(r"`(tests/[A-Za-z0-9_./-]+\.py)", text))
        for path in sorted(named):
            if not (ROOT / path).exists():
                missing.append(f"{doc.name}: {path}")
    assert not missing, missing
