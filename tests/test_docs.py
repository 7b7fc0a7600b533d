"""The documentation: files it names exist, the quickstart runs, every page is in the site's nav,
every public name is in the API reference, the README starts with the set-up commands."""
from __future__ import annotations

import glob
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hpvm_py

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# a mention of a file or folder of the repository: from its top folder, or from a package of
# hpvm_py (docs say `rt/replay.py` for hpvm_py/rt/replay.py)
TOP = ("hpvm_py", "examples", "benchmarks", "tests", "docs")
PACKAGES = ("rt", "ir", "backends", "passes", "frontend", "device", "distributed", "support")
MENTION = re.compile(r"(?<![\w./-])((?:%s)/[\w./*-]*)" % "|".join(TOP + PACKAGES))


def mentions() -> list[tuple[str, str, str]]:
    """(page:line, the mention, the path it names) for every path-like mention in the docs."""
    found = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for match in MENTION.finditer(line):
                text = match.group(1).rstrip(".,:;")
                head = text.split("/")[0]
                if head in PACKAGES and not text.endswith((".py", "/")):
                    continue  # prose such as "device/driver"
                path = text if head in TOP else f"hpvm_py/{text}"
                found.append((f"{page.relative_to(ROOT)}:{number}", text, path))
    return found


def test_the_docs_mention_files() -> None:
    assert len(mentions()) > 100  # the pattern finds them


def test_every_file_the_docs_name_exists() -> None:
    missing = [f"{where}: {text}" + (f" ({path})" if path != text else "")
               for where, text, path in mentions()
               if not (glob.glob(str(ROOT / path)) if "*" in path else (ROOT / path).exists())]
    assert not missing, "the docs name files that are not in the repository (renamed or moved? " \
                        "update the mention):\n" + "\n".join(missing)


SHORT = re.compile(r"(?<![\w./-])([\w-]+(?:/[\w.-]+)+\.(?:py|md|sh|lark|json|toml|yml))\b")
SKIP = {".git", ".venv", ".docs-venv", "site", "__pycache__", ".pytest_cache", ".hypothesis"}


def test_every_file_named_by_a_partial_path_exists() -> None:
    """`gpu/replay.py`, `backends/cpu/threads.py`: some file of the repository ends with it."""
    files = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in SKIP]
        files += ["/" + str((Path(folder) / n).relative_to(ROOT)) for n in names]
    missing = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for match in SHORT.finditer(line):
                if not any(f.endswith("/" + match.group(1)) for f in files):
                    missing.append(f"{page.relative_to(ROOT)}:{number}: {match.group(1)}")
    assert not missing, "the docs name files that are not in the repository:\n" + "\n".join(missing)


def quickstart(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_quickstart_is_the_same_in_the_readme_and_the_site() -> None:
    assert quickstart(ROOT / "README.md") == quickstart(ROOT / "docs" / "index.md")


def test_the_quickstart_runs(tmp_path: Path) -> None:
    program = tmp_path / "quickstart.py"
    program.write_text(quickstart(ROOT / "README.md"), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "c = a + b over 1000000 elements" in result.stdout
    check = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "check", str(program)],
                           capture_output=True, text=True, timeout=300, env=env)
    assert check.returncode == 0 and "ok (1 graph(s), 1 nodes)" in check.stdout, check.stderr


def test_the_readme_starts_with_the_set_up_commands() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    commands = [line.split("#")[0].strip() for line in lines[:8] if line.startswith("make ")]
    assert commands[:2] == ["make demo", "make test"]


def test_the_readme_shows_the_extras() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extras = re.findall(r"^(\w+) = \[", pyproject.split("[project.optional-dependencies]")[1]
                        .split("\n[")[0], re.M)
    assert set(extras) >= {"gpu", "dist", "test", "bench", "docs"}
    for extra in extras:
        assert f"| `{extra}` |" in text, f"the README's install table lacks the {extra} extra"
    assert 'pip install "hpvm-py[gpu,dist]"' in text


def nav_pages() -> list[str]:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config.split("\nnav:\n", 1)[1].split("\nmarkdown_extensions:", 1)[0]
    return re.findall(r"^\s*- (?:[^:\n]+: )?([\w./-]+\.md)\s*$", nav, re.M)


def test_every_page_is_in_the_site_nav() -> None:
    listed = nav_pages()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert not [p for p in listed if p not in pages], "mkdocs.yml's nav names pages that do not exist"
    missing = [p for p in pages if p not in listed]
    assert not missing, f"add these pages to the nav of mkdocs.yml (the user guide): {missing}"
    assert len(listed) == len(set(listed))


def test_every_public_name_is_in_the_api_reference() -> None:
    reference = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    public = [name for name in dir(hpvm_py) if not name.startswith("_")
              and not inspect.ismodule(getattr(hpvm_py, name))]
    for module in ("comm", "distributed", "symmetric", "errors", "math"):
        public.append(module)
    spans = " ".join(re.findall(r"`([^`\n]+)`", reference))  # names shown in code
    missing = [name for name in public
               if f"::: hpvm_py.{name}" not in reference and not re.search(rf"\b{name}\b", spans)]
    assert not missing, f"docs/api.md does not document: {missing}"


@pytest.mark.parametrize("name", [n for n in ("init", "cleanup", "runtime", "launch", "wait", "push",
                                              "pop", "compile", "track_memory", "untrack_memory",
                                              "request_memory", "stats", "to_text", "from_text",
                                              "load", "leaf", "graph", "func", "node", "edge",
                                              "bind_input", "bind_output", "create_node", "hint")])
def test_the_host_api_has_full_docstrings(name: str) -> None:
    doc = inspect.getdoc(getattr(hpvm_py, name)) or ""
    takes_arguments = bool(inspect.signature(getattr(hpvm_py, name)).parameters)
    assert not takes_arguments or "Args:" in doc, f"hpvm.{name}: no Args section"
    assert "Returns:" in doc or "Raises:" in doc, f"hpvm.{name}: no Returns or Raises section"
