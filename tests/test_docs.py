"""The documentation names only files that exist, so a move that forgets the docs fails here.

docs/architecture.md says which module owns each step; a module renamed or moved
without the page being updated would leave a newcomer looking for a file that is
gone.  Markdown links between the README and the docs are checked the same way.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TOP_FOLDERS = ("drtp", "master", "client", "plugins", "analysis", "bench", "tests", "configs", "docs", "scripts")
# a path written in the text: a top-level folder, then folders and a file or a trailing slash
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(TOP_FOLDERS)})/(?:[\w-]+/)*(?:[\w-]+\.(?:py|md|yaml|ipynb)\b)?)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def written_paths(text: str) -> list[str]:
    """Every file (``.py``, ``.md``, ``.yaml``, ``.ipynb``) or folder (``x/``) path the text names."""
    return sorted({m.group(1) for m in PATH.finditer(text)})


def test_path_pattern_finds_files_and_folders_only():
    text = "see `drtp/trace/reader.py`, master/run/plan.py. and `drtp/cluster/`; not drtp.trace or xdrtp/a.py"
    assert written_paths(text) == ["drtp/cluster/", "drtp/trace/reader.py", "master/run/plan.py"]


def test_every_path_in_the_architecture_page_exists():
    paths = written_paths(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len([p for p in paths if p.endswith(".py")]) >= 40  # the page names the owner of every step
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_architecture_page_names_every_package():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    packages = [f"{p.parent.relative_to(ROOT).as_posix()}/" for p in sorted((ROOT / "drtp").glob("*/__init__.py"))]
    packages += ["master/", "client/", "plugins/", "analysis/"]
    unnamed = [p for p in packages if f"`{p}`" not in text]
    assert not unnamed, f"docs/architecture.md does not describe the packages {unnamed}"


def test_readme_links_the_architecture_page():
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.md"))]


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path):
    targets = [m.group(1) for m in LINK.finditer(page.read_text(encoding="utf-8"))]
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    broken = [t for t in local if not (page.parent / t).exists()]
    assert not broken, f"{page.relative_to(ROOT)}: links to missing files {broken}"
