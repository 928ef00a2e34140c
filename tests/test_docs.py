"""The documentation site (mkdocs.yml, docs/) builds with warnings as errors: every page of docs/ in nav,
every link and anchor found, the API reference read from the docstrings of ``fedlight.__all__``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fedlight

REPO = Path(__file__).resolve().parents[1]
pytest.importorskip("mkdocs", reason="the documentation site needs MkDocs (the dev extra: make test installs it)")
pytest.importorskip("mkdocstrings", reason="the API reference needs mkdocstrings[python] (the dev extra)")


def test_the_site_builds_strictly_and_its_api_page_has_every_public_name(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "site/reference/api/index.html").read_text()
    documented = set(re.findall(r'id="fedlight\.api\.(\w+)"', api))
    assert set(fedlight.__all__) <= documented, sorted(set(fedlight.__all__) - documented)
    # the root documents that live beside the code are pages of the site too
    for page in ("reliability", "benchmarks", "reproduction", "robustness"):
        assert (tmp_path / f"site/reference/{page}/index.html").is_file(), page


def test_the_readme_links_only_to_files_that_exist() -> None:
    text = (REPO / "README.md").read_text()
    links = [link.split("#")[0] for link in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in link]
    assert len(links) >= 10
    assert [link for link in links if link and not (REPO / link).exists()] == []
