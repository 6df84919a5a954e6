"""The README and docs/ as a user reads and copies them: every relative link resolves (its file exists, and its
#anchor is a heading of that page), every `./task NAME` names a task of Taskfile.yml, and every block tagged yaml
parses. That the examples are accepted by the API server is tests/integration/test_docs_examples.py.

The checker's own tests (a broken link, a missing anchor, an unknown task and a yaml block that does not parse, each
found) come first, so a checker that finds nothing cannot pass for docs that are right.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import docscheck

PAGES = docscheck.pages()


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(docscheck.ROOT)) for p in paths]


# --- the checker finds what it looks for


def test_the_checker_finds_a_link_to_no_file_and_an_anchor_no_heading_has(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Ready deadline\n\n```sh\n# not a heading\n```\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Title\n\n## Every key\n\n"
        "[fine](docs/other.md#ready-deadline), [self](#every-key), [web](https://example.com/x#y)\n"
        "[gone](docs/nowhere.md) and [wrong anchor](docs/other.md#not-a-heading)\n"
        "[a comment is no heading](docs/other.md#not-a-heading-1) [own](#title-1)\n"
        "`[in code](docs/nowhere.md)` is not a link\n"
    )
    problems = [p.replace(f"{tmp_path}/", "") for p in docscheck.link_problems(page)]
    assert problems == [
        "README.md:6: docs/nowhere.md: no such file docs/nowhere.md",
        "README.md:6: docs/other.md#not-a-heading: docs/other.md has no heading #not-a-heading",
        "README.md:7: docs/other.md#not-a-heading-1: docs/other.md has no heading #not-a-heading-1",
        "README.md:7: #title-1: README.md has no heading #title-1",
    ], problems


def test_anchors_are_githubs() -> None:
    text = (
        "# Phalanx\n## Quick start: the article's tasks\n### `phalanx explain JOB`\n## Three ways (`./task bench`)\n"
        "### 1,000 nodes\n## What `kubectl apply -k manifests/` installs\n## Notes\n## Notes\n"
    )
    assert docscheck.anchors(text) == {
        "phalanx",
        "quick-start-the-articles-tasks",
        "phalanx-explain-job",
        "three-ways-task-bench",
        "1000-nodes",
        "what-kubectl-apply--k-manifests-installs",
        "notes",
        "notes-1",
    }


def test_the_checker_finds_a_task_the_taskfile_does_not_have(tmp_path: Path) -> None:
    page = tmp_path / "README.md"
    page.write_text("Run `./task up`, then `./task test -- -k x`,\n```sh\n./task bench:planner -- --nodes 5000\n./task tset\n```\n")
    problems = docscheck.task_problems(page, {"up", "test", "bench:planner"})
    assert problems == [f"{page}:4: ./task tset: Taskfile.yml has no task 'tset'"], problems


def test_the_checker_finds_a_yaml_block_that_does_not_parse(tmp_path: Path) -> None:
    page = tmp_path / "README.md"
    page.write_text("```yaml\nkind: Job\nmetadata: {name: ok}\n```\n\ntext\n\n```yaml\nspec:\n  template: {spec: [}\n```\n")
    (problem,) = docscheck.yaml_problems(page)
    assert problem.startswith(f"{page}:8: the yaml block does not parse"), problem


def test_only_complete_objects_are_examples(tmp_path: Path) -> None:
    page = tmp_path / "README.md"
    page.write_text(
        "```yaml\nspec:\n  scheduling: {schedulingPolicy: {gang: {minCount: 4}}}\n```\n"
        "```yaml\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\n```\n"
    )
    (fragment, complete) = docscheck.blocks(page)
    assert docscheck.objects(fragment) == []
    assert [o["metadata"]["name"] for o in docscheck.objects(complete)] == ["a", "b"]


# --- the pages


def test_the_pages_are_the_readme_and_docs() -> None:
    names = _ids(PAGES)
    assert names[0] == "README.md"
    for page in ("concepts", "install", "observability", "performance", "reliability", "development"):
        assert f"docs/{page}.md" in names, names


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_relative_link_resolves(page: Path) -> None:
    assert docscheck.links(page), f"{page} has no link at all: the parser is broken"
    problems = docscheck.link_problems(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_task_named_is_in_the_taskfile(page: Path) -> None:
    problems = docscheck.task_problems(page, docscheck.task_names())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_yaml_block_parses(page: Path) -> None:
    problems = docscheck.yaml_problems(page)
    assert not problems, "\n".join(problems)


def test_the_readmes_examples_are_found() -> None:
    """The integration test applies what examples() yields: the README's Job and its PodGroup with two pods."""
    found = {o["kind"] for block in docscheck.examples([docscheck.ROOT / "README.md"]) for o in docscheck.objects(block)}
    assert {"Job", "PodGroup", "Pod"} <= found, found


def test_the_readmes_test_command_installs_what_the_check_reads() -> None:
    """The check parses YAML: PyYAML is in the test extra `./task` installs, whatever the operator itself needs."""
    project = tomllib.loads((docscheck.ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.lower().startswith("pyyaml") for d in project["optional-dependencies"]["test"])
