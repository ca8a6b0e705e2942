"""Every code block of the README and of docs/*.md runs here, against the stack a
reader starts (``tulip-memory dev``), so an example cannot rot.

- ``python`` blocks run in order, each page's in one namespace (a later block may use
  an earlier one's names), with the stack's ``TULIP_*`` settings in the environment;
- ``bash`` blocks carry a marker in the HTML comment before them: ``<!-- bash: run -->``
  runs the block with ``bash`` in a directory laid out as the reader's checkout
  (``.venv``, ``.tulip-dev`` of the running stack, the files the page's Python blocks
  name in their first line, ``# first.py``); ``<!-- bash: skip "reason" -->`` is allowed
  only for the reasons in :data:`SKIP_REASONS`;
- ``json`` blocks must parse; ``text`` blocks are output or synopses: one right after a
  run ``bash`` block is compared with what the block printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser

from tests.docs.stack import DevStack, dev_stack

ROOT = Path(__file__).resolve().parents[2]
#: The quickstart first: its printed output is compared, and it starts from an empty
#: stack as a reader does (later pages add memories to the same user).
QUICKSTART = ROOT / "docs" / "quickstart.md"
PAGES = [
    QUICKSTART,
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p != QUICKSTART),
]
LANGUAGES = {"python", "bash", "json", "text"}
#: Why a shell block may stay unrun: each says where the same thing is run instead, or
#: why running it would not be a test (a minutes-long install, a server that never exits).
SKIP_REASONS = {
    "installs into a new virtualenv; the tests run from the one CI installs",
    "runs the whole test suite: it is what CI runs (.ci/run)",
    "starts the long-running dev stack; the tests start the same stack themselves",
    "needs a deployment's administrator DSN and passwords",
    "installs from the package index and starts a long-running server",
    "the same request is docs/examples/http_client.sh, which tests/service/test_clients.py runs",
}
MARKER = re.compile(r'<!-- bash: (run|skip "([^"]+)") -->\s*$')
#: Output lines a page allows to differ, with what they may be instead (documented
#: beside the output: a rerun finds the event applied already).
VARIANTS = {"pending": {"pending", "applied"}}
FILE_NAME = re.compile(r"\A# ([\w.-]+\.py)\n")
LAST_RUN = "__last_bash_run__"


def _marker(example: Example) -> re.Match[str]:
    before = example.document.text[: example.region.start].rstrip("\n ").rsplit("\n", 1)[-1]
    found = MARKER.search(before)
    assert found, (
        f"{example.path}:{example.line}: a bash block needs <!-- bash: run --> or "
        f'<!-- bash: skip "reason" --> on the line before it'
    )
    return found


def _is_readme_command(example: Example) -> bool:
    """The README's two opening commands (the demo and the test suite, each installing a
    virtualenv of its own) stand bare at its top; CI runs the second (.ci/run) and
    ``tests/test_cli_dev.py`` the first's ``tulip-memory dev --demo``."""
    text = str(example.parsed).strip()
    return Path(example.path).name == "README.md" and text.startswith("python3 -m venv .venv")


def _run_bash(example: Example) -> None:
    if _is_readme_command(example):
        example.namespace[LAST_RUN] = None
        return
    found = _marker(example)
    if found.group(2) is not None:
        assert found.group(2) in SKIP_REASONS, (
            f"{example.path}:{example.line}: not a reason to leave a shell block unrun: "
            f"{found.group(2)!r}"
        )
        example.namespace[LAST_RUN] = None
        return
    stack: DevStack = example.namespace["__stack__"]
    cwd: Path = example.namespace["__tmp__"] / f"bash-{example.line}"
    cwd.mkdir()
    (cwd / ".venv").symlink_to(Path(sys.prefix))
    (cwd / ".tulip-dev").symlink_to(stack.data_dir)
    for name, source in example.namespace["__files__"].items():
        (cwd / name).write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", str(example.parsed)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"{example.path}:{example.line}: {done.stderr}{done.stdout}"
    example.namespace[LAST_RUN] = done.stdout


def _check_output(example: Example) -> None:
    printed = example.namespace.pop(LAST_RUN, None)
    if printed is None:
        return
    expected = str(example.parsed).strip().splitlines()
    got = printed.strip().splitlines()
    assert len(got) == len(expected), f"{example.path}:{example.line}: printed {printed!r}"
    for want, line in zip(expected, got, strict=True):
        assert line == want or line in VARIANTS.get(want, ()), (
            f"{example.path}:{example.line}: printed {line!r} where the page shows {want!r}"
        )


def _check_json(example: Example) -> None:
    json.loads(str(example.parsed))


def _python(example: Example) -> Any:
    source = str(example.parsed)
    named = FILE_NAME.match(source)
    if named:
        example.namespace["__files__"][named.group(1)] = source
    return None


PYTHON = PythonCodeBlockParser()
SYBIL = Sybil(
    parsers=[
        PYTHON,
        CodeBlockParser("bash", _run_bash),
        CodeBlockParser("json", _check_json),
        CodeBlockParser("text", _check_output),
    ]
)
FENCE = re.compile(r"^[ \t]*(?:[-*+][ \t]+)?```(\S*)", re.M)


def _languages(text: str) -> list[str]:
    """The info string of every opening fence (every other fence closes one), but for
    MyST directives (``{toctree}``, ``{eval-rst}``), which are the site's, not code."""
    opening = [m.group(1) for m in FENCE.finditer(text)][::2]
    return [info for info in opening if not info.startswith("{")]


@pytest.fixture(scope="module")
def stack(s3_endpoint: str) -> Iterator[DevStack]:
    yield from dev_stack(s3_endpoint)


def test_every_block_names_a_language_the_tests_run() -> None:
    for page in PAGES:
        languages = _languages(page.read_text())
        unknown = sorted(set(languages) - LANGUAGES)
        assert not unknown, f"{page.name}: code blocks in {unknown} (the tests know {LANGUAGES})"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_code_block_of_the_page_runs(
    page: Path, stack: DevStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if k.startswith("TULIP_")]:
        monkeypatch.delenv(name)
    for name, value in stack.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TULIP_SPOOL_DIR", str(tmp_path / "spool"))
    document = SYBIL.parse(page)
    document.namespace.update(__stack__=stack, __tmp__=tmp_path, __files__={})
    if page.name == "langgraph.md":
        document.namespace["CHECKPOINTS"] = f"file://{tmp_path}/threads"
    blocks = len(_languages(page.read_text()))
    ran = 0
    for example in document:
        if (
            example.region.evaluator is not None
            and example.region.lexemes.get("arguments") == "python"
        ):
            _python(example)
        example.evaluate()
        ran += 1
    assert ran == blocks, f"{page.name}: {blocks} code blocks, {ran} of them run"


def test_the_readme_opens_with_the_demo_and_the_ci_command() -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)
    opening = text.split("\n## ", 1)[0]
    assert opening.count("```") == 4  # exactly two blocks before the first section
    (lang1, demo), (lang2, tests) = blocks[:2]
    assert (lang1, lang2) == ("bash", "bash")
    assert demo.strip().endswith("tulip-memory dev --demo")
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert tests.strip() == ci  # CI runs the README's test command, nothing cleverer
