"""What the docs check reads of the README and docs/: their fenced blocks, relative links, headings' anchors and
`./task NAME` mentions, and the problems it finds in them (pure: no cluster). tests/unit/test_docs.py checks the
pages with it; tests/integration/test_docs_examples.py applies their examples through the API server.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def pages(root: Path = ROOT) -> list[Path]:
    """The README and every page of docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, the line its opening fence is on (1-based), its tag and its text."""

    page: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{_rel(self.page)}:{self.line}"


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)")


def blocks(page: Path, text: str | None = None) -> list[Block]:
    text = page.read_text() if text is None else text
    out: list[Block] = []
    fence: str | None = None
    start, lang, body = 0, "", []
    for number, line in enumerate(text.splitlines(), 1):
        if fence is None:
            if m := _FENCE.match(line):
                fence, start, lang, body = m[1], number, m[2].lower(), []
        elif _closes(line, fence):
            out.append(Block(page, start, lang, "\n".join(body) + "\n"))
            fence = None
        else:
            body.append(line)
    return out


def prose(text: str) -> str:
    """The text outside fenced blocks and inline code spans, line for line (so line numbers still hold)."""
    lines, fence = [], None
    for line in text.splitlines():
        if fence is None and (m := _FENCE.match(line)):
            fence = m[1]
            lines.append("")
        elif fence is not None:
            if _closes(line, fence):
                fence = None
            lines.append("")
        else:
            lines.append(line)
    joined = "\n".join(lines)
    # a code span may wrap onto the next line, never across a paragraph
    return re.sub(r"(`+)((?:(?!\n\s*\n).)+?)\1", lambda m: " " * len(m[0]), joined, flags=re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text, lower-cased, punctuation dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, numbered as GitHub numbers repeats (`name`, `name-1`, ...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fence: str | None = None
    for line in text.splitlines():
        if fence is None and (m := _FENCE.match(line)):
            fence = m[1]
        elif fence is not None:
            if _closes(line, fence):
                fence = None
        elif m := re.match(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$", line):
            base = slug(m[1])
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence) and not stripped.strip(fence[0])


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str

    @property
    def where(self) -> str:
        return f"{_rel(self.page)}:{self.line}"


_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(page: Path, text: str | None = None) -> list[Link]:
    text = page.read_text() if text is None else text
    body = prose(text)
    return [Link(page, body.count("\n", 0, m.start()) + 1, m[1]) for m in _LINK.finditer(body)]


def link_problems(page: Path, text: str | None = None) -> list[str]:
    """Each relative link whose file does not exist, or whose #anchor is no heading of the page it names."""
    problems = []
    for link in links(page, text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link.target, re.IGNORECASE):
            continue  # https:, mailto: and the like: not ours to resolve offline
        path, _, anchor = link.target.partition("#")
        target = page if not path else (page.parent / path).resolve()
        if not target.exists():
            problems.append(f"{link.where}: {link.target}: no such file {_rel(target)}")
            continue
        if anchor:
            if target.suffix != ".md" or target.is_dir():
                problems.append(f"{link.where}: {link.target}: an anchor into {_rel(target)}, which is no Markdown page")
            elif anchor not in anchors(target.read_text() if target != page or text is None else text):
                problems.append(f"{link.where}: {link.target}: {_rel(target)} has no heading #{anchor}")
    return problems


_TASK = re.compile(r"\./task\s+([A-Za-z][\w:.-]*[\w])")


def task_names(taskfile: Path = ROOT / "Taskfile.yml") -> set[str]:
    return set((yaml.safe_load(taskfile.read_text()).get("tasks") or {}).keys())


def task_problems(page: Path, known: set[str], text: str | None = None) -> list[str]:
    """Each `./task NAME` (in prose or in a block) whose NAME is no task of the Taskfile."""
    text = page.read_text() if text is None else text
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in _TASK.finditer(line):
            if m[1] not in known:
                problems.append(f"{_rel(page)}:{number}: ./task {m[1]}: Taskfile.yml has no task {m[1]!r}")
    return problems


def yaml_problems(page: Path, text: str | None = None) -> list[str]:
    """Each block tagged yaml that does not parse."""
    problems = []
    for block in blocks(page, text):
        if block.lang in ("yaml", "yml"):
            try:
                list(yaml.safe_load_all(block.text))
            except yaml.YAMLError as exc:
                problems.append(f"{block.where}: the yaml block does not parse: {exc}")
    return problems


def objects(block: Block) -> list[dict[str, Any]]:
    """The complete API objects of a yaml block (those with apiVersion, kind and a name); fragments are left out."""
    if block.lang not in ("yaml", "yml"):
        return []
    docs = [d for d in yaml.safe_load_all(block.text) if isinstance(d, dict)]
    return [d for d in docs if d.get("apiVersion") and d.get("kind") and (d.get("metadata") or {}).get("name")]


KUEUE_GROUP = "kueue.x-k8s.io"


def examples(of: Iterable[Path] | None = None, *, kueue: bool = False) -> Iterator[Block]:
    """Every yaml block of the pages holding at least one complete API object: what a user applies as it stands.
    A block holding Kueue's objects (README's "Behind Kueue") needs Kueue, which the session cluster does not run:
    `kueue=True` gives those only (test_kueue.py runs them), the default all the others."""
    for page in pages() if of is None else of:
        for block in blocks(page):
            found = objects(block)
            if found and any(o["apiVersion"].split("/")[0] == KUEUE_GROUP for o in found) == kueue:
                yield block


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
