"""The user's documents hold together: every link between them resolves, none points outside
the repository, every test they cite exists, and none speaks of how the code was developed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([REPO_ROOT / "README.md", REPO_ROOT / "compat" / "README.md",
                    *(REPO_ROOT / "docs").glob("*.md")])
#: a Markdown link's target: [text](target)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(document: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``document``."""
    anchors = set()
    for line in document.read_text().splitlines():
        if heading := re.match(r"#{1,6} (.+)", line):
            text = re.sub(r"[^\w\- ]", "", heading.group(1).lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def _local_links(document: Path) -> list[str]:
    return [target for target in LINK.findall(document.read_text())
            if not target.startswith(("http://", "https://", "mailto:"))]


def test_the_readme_links_to_the_docs() -> None:
    links = _local_links(REPO_ROOT / "README.md")
    assert {"docs/guarantees.md", "docs/architecture.md", "docs/benchmarks.md"} <= {
        link.split("#")[0] for link in links}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_link_of_a_document_resolves_inside_the_repository(document: Path) -> None:
    for link in _local_links(document):
        path_part, _, anchor = link.partition("#")
        target = (document.parent / path_part).resolve() if path_part else document
        # Then the file is in this repository and exists, and so does the heading it names
        assert target.is_relative_to(REPO_ROOT) and target.exists(), f"{document.name}: {link}"
        assert not anchor or anchor in _anchors(target), f"{document.name}: {link}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_no_document_names_an_issue_or_a_place_outside_the_repository(document: Path) -> None:
    text = document.read_text()
    assert re.findall(r"\bissues? \d+", text, flags=re.IGNORECASE) == []
    assert re.findall(r"\.\./shared|/work/", text) == []


def test_every_test_the_documents_name_exists() -> None:
    # Given each test file (and test, or the start of its name: `name...`) README and docs/ cite
    # as evidence; compat/README.md names Scrapy's own tests, not ours
    cited = re.compile(r"`(?:tests/)?((?:unit/)?test_\w+\.py)(?:::(\w+?))?(?:\.\.\.)?`")
    missing = []
    for document in DOCUMENTS:
        if document.parent.name == "compat":
            continue
        for file_name, test in cited.findall(document.read_text()):
            path = REPO_ROOT / "tests" / file_name
            # Then the file exists and defines that test
            if not path.exists() or (test and f"def {test}" not in path.read_text()):
                missing.append(f"{document.name}: {file_name}::{test}")
    assert missing == []
