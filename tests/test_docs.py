"""The documentation: the MkDocs site in docs/ builds strictly and offline, the README stays the
short version with the two commands CI and users run, what the pages name exists, and the
snippets meant to run do run (here the README's Keras snippet; the console excerpts of
docs/tools.md in test_readme.py, the other readers' snippets in test_readers.py, each found by
`fenced_blocks`)."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# The pages people read, with their limits (issue 39: docs people read).
MAX_LINES = {"README.md": 300, "benchmarks/RESULTS.md": 400, "CHANGELOG.md": 120}
MAX_CELL = 300
# Names the pages give as old ones, still answered with a DeprecationWarning.
OLD_NAMES = {"loaders.Dataset"}
_HEADING = re.compile(r"(#{1,6}) \S")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _outside_fences(text: str) -> list[tuple[str, bool]]:
    """Each line of a Markdown text, and whether it lies outside fenced code (where a line
    starting with `#` is a heading, not a shell comment)."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            lines.append((line, False))
        else:
            lines.append((line, not fenced))
    return lines


def headings(text: str) -> list[str]:
    """The heading lines of a Markdown text (`## Title`), code blocks left out."""
    return [line for line, outside in _outside_fences(text) if outside and _HEADING.match(line)]


def fenced_blocks(page: str, section: str | None = None) -> list[tuple[str, str]]:
    """(language, code) of each fenced block of a Markdown page (a path from the repository's
    root: "README.md", "docs/tools.md"), or of one section of it: from the heading line
    `section` ("## Plain TensorFlow") to the next heading of its level or a higher one.

    Fails when the page, the section or every block is missing, so that a test of snippets
    never passes on none (the snippets moved from the README to the docs once already)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    if section is not None:
        lines = _outside_fences(text)
        starts = [i for i, (line, outside) in enumerate(lines) if outside and line == section]
        assert starts, f"{page} has no heading {section!r}"
        level = len(section) - len(section.lstrip("#"))
        end = len(lines)
        for i in range(starts[0] + 1, len(lines)):
            line, outside = lines[i]
            found = outside and _HEADING.match(line)
            if found and len(found.group(1)) <= level:
                end = i
                break
        text = "\n".join(line for line, _ in lines[starts[0] + 1 : end])
    blocks = _FENCE.findall(text)
    assert blocks, f"no fenced block in {page}" + (f" under {section!r}" if section else "")
    return blocks


def slug(heading: str) -> str:
    """The anchor of a heading, as MkDocs (and GitHub, for these headings) makes it."""
    from markdown.extensions.toc import slugify

    return slugify(heading.lstrip("#").strip(), "-")


def test_the_site_builds_strictly_and_offline(tmp_path):
    """`mkdocs build --strict`: a broken link or anchor, a page missing from the nav or a nav
    entry without its page fails (mkdocs.yml's `validation` makes each a warning). Proxies that
    lead nowhere make any download during the build fail too."""
    nowhere = "http://127.0.0.1:9"
    proxies = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "no_proxy": "", "NO_PROXY": ""}
    env.update(dict.fromkeys(proxies, nowhere))
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert "WARNING" not in output, output[-5000:]
    for page in PAGES:
        assert (site / page.stem / "index.html").exists() or page.stem == "index", page
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "fonts.googleapis.com" not in index  # the theme's web fonts are off


def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "strict: true" in nav and "docs_dir: docs" in nav
    for page in PAGES:
        assert re.search(rf":\s+{re.escape(page.name)}\s*$", nav, re.M), page.name


@pytest.mark.parametrize("name", sorted(MAX_LINES))
def test_the_pages_people_read_stay_short(name):
    lines = (ROOT / name).read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES[name], f"{name}: {lines} lines, more than {MAX_LINES[name]}"


def test_tables_have_short_cells():
    for path in [*PAGES, *(ROOT / name for name in MAX_LINES)]:
        text = path.read_text(encoding="utf-8")
        for line, outside in _outside_fences(text):
            if outside and line.startswith("|"):
                for cell in line.strip().strip("|").split(" | "):
                    assert len(cell) <= MAX_CELL, f"{path.name}: a cell of {len(cell)}: {cell}"


def test_the_readme_gives_the_two_commands_and_ci_runs_the_test_command():
    """`.ci/run` runs the README's test command: the line that says it stays word for word."""
    (commands,) = [code for lang, code in fenced_blocks("README.md", "## Quick start") if code]
    lines = commands.rstrip("\n").split("\n")
    assert lines == [
        "./run_local.sh     # main job: generate the bundled sample, build it on Beam's local "
        "runner, train a Keras CNN",
        "./run_tests.sh     # the tests (ruff, mypy, pytest); this is what CI runs",
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^exec \./run_tests\.sh$", ci, re.M)
    for script in ("run_local.sh", "run_tests.sh"):
        assert os.access(ROOT / script, os.X_OK), script


def test_links_between_the_readme_and_the_pages_resolve():
    """MkDocs checks the links between pages; the README's links to them are checked here, with
    their anchors."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else ROOT / "README.md"
        assert target.exists(), link
        if anchor:
            text = target.read_text(encoding="utf-8")
            assert anchor in [slug(h) for h in headings(text)], link


def test_every_python_snippet_of_the_docs_parses():
    for page in [ROOT / "README.md", *PAGES]:
        text = page.read_text(encoding="utf-8")
        for language, code in _FENCE.findall(text):
            if language == "python":
                ast.parse(code, filename=str(page))


def _code_of(page: pathlib.Path) -> str:
    return "\n".join(code for _, code in _FENCE.findall(page.read_text(encoding="utf-8")))


def test_the_commands_the_docs_show_exist():
    """Every `python -m beam_pipeline COMMAND` (or `./run_local.sh COMMAND`) of a code block is a
    command of the command line, and every `python -m MODULE` a module of the checkout."""
    from beam_pipeline.tools.commands import COMMANDS

    for page in [ROOT / "README.md", *PAGES, ROOT / "benchmarks" / "RESULTS.md"]:
        code = _code_of(page)
        command = r"^(?:\$ )?(?:\S*python -m beam_pipeline|\./run_local\.sh) ([\w-]+)"
        for word in re.findall(command, code, re.M):
            assert word.startswith("-") or word in COMMANDS, f"{page.name}: command {word}"
        for module in re.findall(r"-m ((?:beam_pipeline|loaders|benchmarks)\.[\w.]+)", code):
            path = ROOT / module.replace(".", "/")
            assert path.with_suffix(".py").exists() or path.is_dir(), f"{page.name}: {module}"


def _resolves(dotted: str) -> bool:
    """A dotted name is a module of the checkout, or a name its parent module defines, imports
    or hands out (`loaders.load_dali_dataset` through the package's `__getattr__`)."""
    path = ROOT / dotted.replace(".", "/")
    if path.with_suffix(".py").exists() or (path / "__init__.py").exists():
        return True
    parent, name = path.parent, path.name
    source = (
        parent.with_suffix(".py") if parent.with_suffix(".py").exists() else parent / "__init__.py"
    )
    if not source.exists():
        return False
    defined = (
        rf"^(?:def|class) {name}\b|^{name}\s*[:=]"  # defined there
        rf"|^\s*from \S+ import .*\b{name}\b|^\s+{name},$"  # imported there
        rf'|"{name}"'  # handed out by name (a module `__getattr__`)
    )
    return re.search(defined, source.read_text(encoding="utf-8"), re.M) is not None


def test_every_flag_of_the_build_has_a_row_in_the_flag_table():
    """docs/building.md's table names each flag `BuildOptions` adds (the console's too)."""
    import argparse

    from beam_pipeline.options import BuildOptions

    parser = argparse.ArgumentParser()
    BuildOptions._add_argparse_args(parser)
    flags = {flag for action in parser._actions for flag in action.option_strings} - {
        "-h",
        "--help",
    }
    rows = [
        line for line in (DOCS / "building.md").read_text().splitlines() if line.startswith("| `--")
    ]
    named = {flag for row in rows for flag in re.findall(r"`(--[a-z_]+)", row.split(" | ")[0])}
    assert flags - named == set()


def test_where_the_code_lives_names_every_module_of_the_builder():
    """How it works' table of the builder's modules, by sub-package, misses none."""
    text = (DOCS / "how-it-works.md").read_text().split("## Where the code lives")[1]
    rows = {}
    for line in text.split("\n\n", 2)[2].splitlines():
        if line.startswith("| ") and not line.startswith("| sub-package"):
            package, modules = line.split(" | ")[:2]
            folder = package.strip("| `/") if "top level" not in package else ""
            rows.setdefault(folder, set()).update(re.findall(r"`(\w+)`", modules))
    package = ROOT / "beam_pipeline"
    missing = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if path.stem not in ("__init__", "__main__")
        and path.stem not in rows.get(path.parent.relative_to(package).as_posix().strip("."), ())
    ]
    assert missing == []


def test_the_modules_the_docs_name_exist():
    """The pages name modules by their paths in the package: each path and dotted name, and each
    module of the table in how-it-works.md, is a module (or a name in one) of the checkout."""
    named = set()
    for page in [ROOT / "README.md", *PAGES]:  # not CHANGELOG.md, which names old paths
        text = page.read_text(encoding="utf-8")
        package_path = r"\b((?:beam_pipeline|schemas|loaders|benchmarks)/[\w/]+\.py)"
        named.update(re.findall(package_path, text))
        for dotted in re.findall(r"`(?:python -m )?((?:beam_pipeline|loaders)\.[\w.]+)", text):
            dotted = dotted.rstrip(".")
            assert dotted in OLD_NAMES or _resolves(dotted), f"{page.name}: {dotted}"
    table = (DOCS / "how-it-works.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)/` \| ([^|]+) \|", table, re.M)
    assert rows
    for package, modules in rows:
        for module in re.findall(r"`(\w+)`", modules):
            named.add(f"beam_pipeline/{package}/{module}.py")
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, missing


def test_the_benchmark_sections_the_docs_cite_exist():
    """Pages cite figures as `benchmarks/RESULTS.md`, "SECTION": each such section is there."""
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    sections = {line.lstrip("#").strip() for line in headings(results)}
    cited = 0
    for page in [ROOT / "README.md", *PAGES]:
        text = re.sub(r"\s+", " ", page.read_text(encoding="utf-8"))
        for name in re.findall(r'benchmarks/RESULTS\.md`?,? "([^"]+)"', text):
            assert name in sections, f"{page.name} cites a section RESULTS.md lacks: {name}"
            cited += 1
    assert cited


@pytest.fixture(scope="module")
def sample_dir(tmp_path_factory):
    """A working directory where `sample_data/out` is a build of the sample generator, as
    `./run_local.sh` leaves it (smaller)."""
    from helpers import build

    from beam_pipeline.tools import sample_tree

    tree = tmp_path_factory.mktemp("tree")
    sample_tree.write_tree(str(tree), num_train=40, num_val=10, seed=4)
    work = tmp_path_factory.mktemp("work")
    build(tree, work / "sample_data" / "out", "--num_shards", "train=2,val=1")
    return work


@pytest.mark.slow
def test_the_readme_keras_snippet_trains_on_a_build(sample_dir):
    (code,) = [code for lang, code in fenced_blocks("README.md", "## Load it in Keras") if lang]
    probe = code + "\nprint('trained', model.count_params(), info.num_classes)\n"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=sample_dir,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("trained ")
