"""The documentation site builds with warnings as errors (a broken link, a page left
out of the table of contents, a docstring autodoc cannot render), and the README stays
what it is for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"), str(tmp_path / "html")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    reference = (tmp_path / "html" / "reference.html").read_text()
    for name in ("Producer", "Reader.wait", "SavedCheckpoint", "PgMemory", "get_checkpointer"):
        assert name in reference, f"the API reference lost {name}"


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert blocks[1].strip() == ci, "the README's test command is the one CI runs"
    assert "tulip-memory dev --demo" in blocks[0]
    example = re.search(r"```python\n(.*?)```", text, re.S)
    assert example and len(example.group(1).strip().splitlines()) <= 20


def test_every_relative_link_of_the_readme_and_the_pages_resolves() -> None:
    for page in [README, *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
