"""The repository explains itself: no file cites a document a fresh clone does not have, and
every `docs/<page>.md#anchor` link lands on a heading of that page (docs/references.md,
docs/high-concurrency-rules.md and the rest)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from functools import cache

import pytest

from support import ci_gate
from support.paths import REPO

DOCS = REPO / "docs"

# Notes that lived beside the repository, never in it; citing them sends a reader nowhere.
OUTSIDE = re.compile(
    r"vllm-reference|field-practices|dsv4-kv|testbed-recipe|high-concurrency chapter"
    r"|seed chapter|(?<![\w/.])\.\./shared\b"
    r"|(?<![\w/.])shared/(?:kv_cases|perf_cases|gpu|seed|docs)\b"
)
# This file names them in order to look for them.
MAY_NAME_OUTSIDE = {"tests/unit/repository/test_references.py"}

# docs/<page>.md#anchor anywhere (a repository path, or ../ hops to it), but not a
# URL's path into some other project's docs/ folder.
REPO_DOC_LINK = re.compile(r"(?:(?<=\.\./)|(?<![\w./-]))docs/([\w.-]+\.md)#([\w-]+)")
# Inside a docs page: [text](page.md#anchor) or [text](#anchor), relative to docs/.
PAGE_LINK = re.compile(r"\]\(([\w.-]+\.md)?#([\w-]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: link targets dropped, lower case, punctuation
    other than '-' and '_' removed, each space a '-'."""
    text = re.sub(r"\]\([^)]*\)", "]", heading)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every anchor of a page: its headings outside code fences (repeats get -1, -2, ...)
    and explicit <a id/name> targets."""
    found: set[str] = set(HTML_ANCHOR.findall(markdown))
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def outside_citations(text: str) -> list[str]:
    """The lines of `text` that cite a document outside the repository."""
    return [line.strip() for line in text.splitlines() if OUTSIDE.search(line)]


def doc_links(rel: str, text: str) -> Iterator[tuple[str, str]]:
    """(page under docs/, anchor) for every anchor link in the file at `rel`."""
    for page, anchor in REPO_DOC_LINK.findall(text):
        yield page, anchor
    if rel.startswith("docs/") and rel.count("/") == 1:
        for page, anchor in PAGE_LINK.findall(text):
            yield page or rel.removeprefix("docs/"), anchor


@cache
def repository_texts() -> tuple[tuple[str, str], ...]:
    """(path, text) of every file git tracks or would track (untracked but not ignored), text
    files only: a file with a NUL byte or that is not UTF-8 is skipped."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        ci_gate.require(False, "not a git checkout: the tracked files cannot be listed")
        return ()
    out = []
    for rel in sorted({name for name in listed.decode().split("\0") if name}):
        path = REPO / rel
        if not path.is_file() or path.is_symlink():
            continue  # deleted in the working tree, or a link to a file listed on its own
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        try:
            out.append((rel, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return tuple(out)


@cache
def page_anchors(page: str) -> frozenset[str] | None:
    path = DOCS / page
    return frozenset(anchors(path.read_text(encoding="utf-8"))) if path.is_file() else None


def test_no_file_cites_documents_outside_the_repository() -> None:
    cited = [
        f"{rel}: {line[:120]}"
        for rel, text in repository_texts()
        if rel not in MAY_NAME_OUTSIDE
        for line in outside_citations(text)
    ]
    assert not cited, "cite docs/references.md or a public source instead:\n" + "\n".join(cited)


def test_every_docs_anchor_link_lands_on_a_heading() -> None:
    broken = []
    for rel, text in repository_texts():
        for page, anchor in doc_links(rel, text):
            known = page_anchors(page)
            if known is None:
                broken.append(f"{rel}: docs/{page} does not exist (#{anchor})")
            elif anchor not in known:
                broken.append(f"{rel}: docs/{page} has no heading for #{anchor}")
    assert not broken, "\n".join(sorted(set(broken)))


def test_the_new_pages_are_linked_from_the_readme() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in ("docs/references.md", "docs/high-concurrency-rules.md"):
        assert f"]({page})" in readme, page


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("KV budget", "kv-budget"),
        ("`max-num-seqs` from the KV budget", "max-num-seqs-from-the-kv-budget"),
        (
            "`vfleet plan`: the parallel split and the scheduler knobs",
            "vfleet-plan-the-parallel-split-and-the-scheduler-knobs",
        ),
        ("The health gate: a host the checks fail", "the-health-gate-a-host-the-checks-fail"),
        ("What is real, and what stands in for a GPU", "what-is-real-and-what-stands-in-for-a-gpu"),
        ("Read [the rules](rules.md) first", "read-the-rules-first"),
        ("max_num_seqs", "max_num_seqs"),
    ],
)
def test_slug_is_githubs_anchor(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_anchors_skip_code_fences_and_number_repeats() -> None:
    page = '# Top\n\n```bash\n# not a heading\n```\n\n## Notes\n\n## Notes\n\n<a id="pin"></a>\n'
    assert anchors(page) == {"top", "notes", "notes-1", "pin"}


def test_a_citation_of_an_outside_note_is_caught() -> None:
    # Built from parts so that this file itself cites nothing outside the repository.
    note, folder = "vllm-" + "reference.md §2", "../" + "shared/docs/x.md"
    cited = [f"# per {note}", f"see {folder}", "the high-concurrency chapter's curve"]
    text = "ok line\n" + "\n".join(cited) + "\nhttps://example.org/repo/shared/docs is fine\n"
    assert outside_citations(text) == cited


def test_links_are_found_in_code_pages_and_relative_paths() -> None:
    code = "# docs/references.md#kv-budget and ../../docs/plan.md#cluster-spec\n"
    url = "see https://github.com/o/r/blob/main/docs/x.md#y\n"
    assert list(doc_links("controller/a.py", code + url)) == [
        ("references.md", "kv-budget"),
        ("plan.md", "cluster-spec"),
    ]
    page = "[a](budget.md#top) and [b](#here) and [c](https://x.org/p.md#q)\n"
    assert list(doc_links("docs/plan.md", page)) == [("budget.md", "top"), ("plan.md", "here")]
    assert list(doc_links("README.md", page)) == []
