"""results.json's ``provenance``: the git commit of the source that ran, never failing a run without git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fedlight.engine.loop import provenance
from fedlight.engine.loop.provenance import ended_now, git_source, new_segment, summary

REPO = Path(__file__).resolve().parents[1]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git checkout whose ``pkg/`` is a committed package; returns the package folder."""
    package = tmp_path / "repo/pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    _git(package.parent, "init", "-q")
    _git(package.parent, "add", ".")
    _git(package.parent, "commit", "-qm", "first")
    return package


def test_this_checkouts_commit_and_dirty_flag() -> None:
    found = git_source()
    assert found["commit"] == _git(REPO, "rev-parse", "HEAD")
    assert found["dirty"] == bool(_git(REPO, "status", "--porcelain", "--untracked-files=no")
                                  or _git(REPO / "fedlight", "status", "--porcelain", "--untracked-files=all", "--", "."))
    assert found["git_note"] is None


def test_dirty_flips_when_a_tracked_file_changes(checkout: Path) -> None:
    clean = git_source(checkout)
    assert clean == {"commit": _git(checkout, "rev-parse", "HEAD"), "dirty": False, "git_note": None}
    (checkout.parent / "notes.txt").write_text("")  # untracked outside the package: not code that ran
    (checkout.parent / ".gitignore").write_text("__pycache__/\n")
    (checkout / "__pycache__").mkdir()
    (checkout / "__pycache__/x.pyc").write_text("")  # ignored
    assert git_source(checkout)["dirty"] is False
    (checkout / "__init__.py").write_text("x = 2\n")
    assert git_source(checkout) == {**clean, "dirty": True}


def test_an_untracked_module_in_the_package_is_dirty(checkout: Path) -> None:
    """A new module the package holds but git does not track may run (a registry imports it): not the commit."""
    (checkout / "sub").mkdir()
    (checkout / "sub/new_module.py").write_text("")
    assert git_source(checkout)["dirty"] is True


def test_no_checkout_gives_a_null_commit_and_says_why(tmp_path: Path, checkout: Path) -> None:
    installed = tmp_path / "site-packages/pkg"
    installed.mkdir(parents=True)
    ignored = checkout.parent / ".venv/pkg"  # an installed copy inside a checkout, which git does not track
    ignored.mkdir(parents=True)
    (checkout.parent / ".gitignore").write_text(".venv/\n")
    for folder in (installed, ignored):
        found = git_source(folder)
        assert found["commit"] is None and found["dirty"] is None
        assert "not in a git checkout" in found["git_note"] and str(folder) in found["git_note"]


def test_no_git_or_a_slow_git_never_fails(checkout: Path, monkeypatch) -> None:
    monkeypatch.setattr(provenance, "GIT_TIMEOUT_S", 1e-6)
    assert git_source(checkout) == {"commit": None, "dirty": None, "git_note": "git took over 1e-06 s"}
    monkeypatch.setenv("PATH", "")
    assert git_source(checkout) == {"commit": None, "dirty": None, "git_note": "git is not installed"}


def test_summary_starts_with_the_first_segment_and_ends_with_the_last(monkeypatch) -> None:
    assert summary([]) is None and ended_now([]) == []
    first = {**new_segment("cpu", 1), "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"}
    monkeypatch.setattr(provenance, "git_source", lambda _: {"commit": "b" * 40, "dirty": True, "git_note": None})
    second = new_segment("cuda: NVIDIA H200", 4)
    later = ended_now([first, second])
    assert later[0] == first and later[1]["end"] >= second["end"] and second["end"] == second["start"]
    found = summary(later)
    assert found["start"] == first["start"] and found["end"] == later[1]["end"]
    assert (found["commit"], found["dirty"], found["device"], found["processes"]) == ("b" * 40, True,
                                                                                      "cuda: NVIDIA H200", 4)
    assert found["segments"] == later
