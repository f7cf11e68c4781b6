"""The documentation stands on its own: relative links resolve inside the repository, and the
architecture page names modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").glob("*/README.md")),
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_stay_in_the_repository(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+://|^mailto:|^#", target):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
        assert path.exists(), f"{page.name} links to a missing file: {target}"


def test_architecture_page_names_existing_modules() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    for section in (
        "## Layers",
        "## Contracts",
        "## Transition order",
        "## Commit protocol",
        "## Process model",
    ):
        assert section in text
    cited = set(re.findall(r"`(odsd/[\w/]+(?:\.py)?)`", text))
    assert len(cited) > 30
    for path in cited:
        assert (ROOT / path).exists(), f"docs/architecture.md cites {path}, which does not exist"
    # Short forms in a table cell ("`retention.py`" after "odsd/store/compaction.py") live beside the first.
    for row in re.findall(r"^\| [^|]+ \| (`odsd/[^|]+)\|$", text, flags=re.M):
        names = re.findall(r"`([\w/.]+)`", row)
        base = (ROOT / names[0]).parent
        for name in names[1:]:
            assert (ROOT / name).exists() or (base / name).exists(), f"{row}: {name} does not exist"


def test_plugin_path_is_documented() -> None:
    """What a third party needs to plug in an env and an expert, found in docs/experts.md and docs/envs.md."""
    experts = (ROOT / "docs" / "experts.md").read_text()
    for needle in (
        "factory(env_spec: EnvSpec, **expert_kwargs) -> Expert",
        "ExpertSpec(name: str, version: str, kind, state_conditioned: bool)",
        '`"planner"`',
        '`"policy"`',
        '`"demo"`',
        "ExpertQuery(action, valid, confidence=None, failure=None, metadata={})",
        "examples/pendulum",
    ):
        assert needle in experts, needle
    envs = (ROOT / "docs" / "envs.md").read_text()
    for needle in (
        "gymnasium:<module>:<EnvId>",
        '`"observation"`',
        "`observation.0`",
        "**Success signal.**",
        'info["is_success"]',
        "examples/pendulum",
    ):
        assert needle in envs, needle
    assert (ROOT / "examples" / "pendulum" / "README.md").exists()
