"""Every Python code block in docs/ runs, in order, one namespace per page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md") if "```python" in p.read_text(encoding="utf-8"))


def test_the_docs_have_code_to_run() -> None:
    assert len(PAGES) >= 5


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_code_block_on_the_page_runs(page: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for number, block in enumerate(blocks, 1):
        code = compile(block, f"{page.name}[block {number}]", "exec")
        exec(code, namespace)


def test_the_provider_capability_table_in_the_docs_is_the_live_one() -> None:
    from toolrelay.backends.providers import capability_table

    assert capability_table() in (DOCS / "providers.md").read_text(encoding="utf-8")
