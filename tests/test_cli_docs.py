"""The CLI reference in docs/cli.md is generated from --help and must not drift."""

import os
import pathlib
import subprocess
import sys

import pytest

from conftest import run_cli
from ctape import clidoc
from ctape.cli import main

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "cli.md"
COMMANDS = sorted(main.commands)
# every command path, subcommands of groups included (`session use`)
PATHS = [name for name in COMMANDS] + [
    f"{name} {sub}" for name in COMMANDS if hasattr(main.commands[name], "commands") for sub in sorted(main.commands[name].commands)
]


def test_cli_md_is_up_to_date():
    assert DOC.read_text(encoding="utf-8") == clidoc.render(), "run python -m ctape.clidoc > docs/cli.md"


def test_clidoc_is_deterministic_and_ignores_the_terminal(monkeypatch):
    first = clidoc.render()
    monkeypatch.setenv("COLUMNS", "40")
    assert clidoc.render() == first
    for name in PATHS:
        assert f"## `ctape {name}`" in first
    assert first.count("```text\n") == len(PATHS) + 1


def test_clidoc_module_prints_the_reference():
    p = subprocess.run([sys.executable, "-m", "ctape.clidoc"], capture_output=True, env={**os.environ, "COLUMNS": "33"})
    assert p.returncode == 0 and p.stderr == b""
    assert p.stdout.decode("utf-8") == clidoc.render()


def test_top_level_help_has_examples():
    p = run_cli("--help")
    assert p.returncode == 0, p.stderr
    assert "Examples:" in p.stdout.decode()
    assert p.stderr == b""


@pytest.mark.parametrize("name", PATHS)
def test_every_subcommand_help_has_examples(name):
    p = run_cli(*name.split(), "--help")
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    first = out.splitlines()[0]
    assert first.startswith("Usage: ") and f"ctape {name} [OPTIONS]" in first, first
    assert "Examples:" in out
    assert p.stderr == b""
    # one example a line, as typed (click rewraps a paragraph without \b: scan's ran together)
    assert "Examples:\n" in out, out
    lines = out.split("Examples:", 1)[1].splitlines()[1:]
    examples = [x for x in lines[: next((i for i, x in enumerate(lines) if not x.strip()), len(lines))]]
    assert examples and all("ctape" in x and "   ctape " not in x.strip() for x in examples), examples


def test_version_works_from_a_checkout_that_is_not_installed(monkeypatch):
    """`python -m ctape --version` in a checkout without package metadata printed click's
    RuntimeError traceback ('ctape' is not installed); it prints the package's version."""
    import importlib.metadata

    from click.testing import CliRunner

    import ctape
    from ctape.cli import main

    real = importlib.metadata.version

    def not_installed(name):
        if name == "ctape":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and r.output == f"ctape, version {ctape.__version__}\n", (r.output, r.exception)
    assert run_cli("--version", check=True).stdout.decode().startswith("ctape, version ")
