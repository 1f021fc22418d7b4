"""The layering the design relies on, read from the source with `ast` (docs/architecture.md).

Each sub-package of `beam_pipeline` is a layer and may import only the layers below it; the pure
core touches neither Beam nor files; the stage modules are siblings; only `runners/` reaches
into a runner's internals; the tools never import the build command; `schemas` is the contract
and imports neither half; the loader never imports the builder (training hosts need no Beam).
"""

import ast
import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("beam_pipeline", "schemas", "loaders")

# The units of the builder (its sub-packages and top-level modules) and what each may import,
# besides itself and `schemas`. Lowest first.
LAYERS = {
    "core": set(),
    "arguments": set(),
    "failures": set(),
    "interrupts": {"failures"},
    "tree": {"core"},
    "output": {"core", "tree", "failures", "interrupts"},
    "console": {"core", "tree"},
    "stages": {"core", "tree", "output", "console", "failures", "interrupts"},
    "options": {"core", "tree", "console"},
    "runners": {"core", "tree", "options", "arguments", "failures", "interrupts"},
    "pipeline": {"core", "tree", "output", "console", "stages", "options", "runners", "failures"},
    "tools": {
        *("core", "tree", "output", "console", "stages", "options", "runners", "pipeline"),
        *("arguments", "failures", "interrupts"),
    },
    "__main__": {"tools"},
    "__init__": set(),
}
STAGES = {
    f"beam_pipeline.stages.{name}" for name in ("discovery", "labelling", "writing", "finalize")
}
BUILD_COMMAND = "beam_pipeline.tools.build"
# Modules and calls that touch the file system: the pure core has none of them.
FILE_SYSTEM_MODULES = {"os", "pathlib", "shutil", "tempfile", "glob", "fcntl", "apache_beam"}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    """The layer of a builder module: `beam_pipeline.tree.listing` → `tree`."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def _load_drawing_script():
    spec = importlib.util.spec_from_file_location("draw", ROOT / "scripts" / "draw_architecture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DRAW = _load_drawing_script()
_all_imports = DRAW.all_imports


SOURCES = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
PATHS = {_module_name(path): path for path in SOURCES}
ALL_IMPORTS = {_module_name(path): _all_imports(path) for path in SOURCES}
GRAPH = {
    module: {name for name in imports if name.split(".")[0] in PACKAGES} - {module}
    for module, imports in ALL_IMPORTS.items()
}
BUILDER = sorted(module for module in GRAPH if module.startswith("beam_pipeline"))


def test_every_builder_module_is_in_a_layer():
    assert {_unit(module) for module in BUILDER} <= set(LAYERS)


def test_the_stage_modules_exist():
    assert set(GRAPH) >= STAGES


@pytest.mark.parametrize("module", BUILDER)
def test_a_builder_module_imports_only_the_layers_below_it(module):
    unit = _unit(module)
    allowed = LAYERS[unit] | {unit}
    wrong = sorted(
        name
        for name in GRAPH[module]
        if name.startswith("beam_pipeline.") and _unit(name) not in allowed
    )
    assert wrong == [], f"{module} ({unit}) imports {wrong}"


@pytest.mark.parametrize("module", [m for m in BUILDER if _unit(m) == "core"])
def test_the_pure_core_imports_no_beam_and_touches_no_file_system(module):
    assert not {name.split(".")[0] for name in ALL_IMPORTS[module]} & FILE_SYSTEM_MODULES
    path = PATHS[module]
    calls = [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open"
    ]
    assert calls == [], f"{module} calls open() at lines {calls}"


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_stage_module_imports_no_other_stage(stage):
    assert GRAPH[stage] & STAGES == set()


def test_only_the_pipeline_and_the_plan_import_the_stages():
    importers = {module for module, imports in GRAPH.items() if imports & STAGES}
    plan = {"beam_pipeline.tools.plan", "beam_pipeline.tools.plan_report"}
    assert importers <= {"beam_pipeline.pipeline", *plan}


def test_no_module_imports_the_build_command():
    # The dispatcher (`tools.commands`) runs it by name; nothing else may depend on it.
    assert [module for module, imports in GRAPH.items() if BUILD_COMMAND in imports] == []


@pytest.mark.parametrize("module", BUILDER + [m for m in GRAPH if m.startswith("loaders")])
def test_only_the_runners_reach_into_a_runner(module):
    if module.startswith("beam_pipeline.runners"):
        return
    path = PATHS[module]
    private = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("apache_beam"):
            private += [alias.name for alias in node.names if alias.name.startswith("_")]
            if node.module.startswith("apache_beam.runners"):
                private.append(node.module)
        if isinstance(node, ast.Import):
            private += [a.name for a in node.names if a.name.startswith("apache_beam.runners")]
    assert private == [], f"{module} uses {private}"


def test_the_contract_imports_neither_half_and_the_loader_not_the_builder():
    for module, imports in GRAPH.items():
        if module.startswith("schemas"):
            assert not {i for i in imports if not i.startswith("schemas")}, module
        if module.startswith("loaders"):
            assert not {i for i in imports if i.startswith("beam_pipeline")}, module


def test_the_import_graph_has_no_cycles():
    done, active = set(), []

    def visit(module):
        if module in active:
            raise AssertionError(f"import cycle: {' -> '.join([*active, module])}")
        if module in done or module not in GRAPH:
            return
        active.append(module)
        for dependency in sorted(GRAPH[module]):
            visit(dependency)
        active.pop()
        done.add(module)

    for module in sorted(GRAPH):
        visit(module)


def test_tests_and_benchmarks_import_no_private_names():
    private = []
    for path in sorted([*ROOT.glob("tests/*.py"), *ROOT.glob("benchmarks/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
                private += [
                    f"{path.name}: {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                ]
    assert private == []


FOLDERS = sorted({path.parent for path in SOURCES})


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_folder_holds_at_most_15_modules(folder):
    assert len(list(folder.glob("*.py"))) <= 15


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_stay_short(path):
    """At most 460 lines a module and 60 a function (docstring included): a long one is split
    where its concerns part."""
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") <= 460
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > 60
    ]
    assert long == []


def test_the_architecture_page_names_each_layers_imports_as_the_tests_hold_them():
    """docs/architecture.md's layer table: a row per layer, its "may import" column the
    layer's `LAYERS` entry (`tools/`: every layer above it)."""
    text = (ROOT / "docs/architecture.md").read_text()
    table = text.split("| layer | what lives there | may import |\n")[1].split("\n\n")[0]
    rows = table.splitlines()[1:]
    named: dict[str, set[str]] = {}
    for row in rows:
        layer_cell, _, imports_cell = row.strip("|").split(" | ")
        layer = re.findall(r"`([^`]+)`", layer_cell)[0].rstrip("/")
        imports = set(re.findall(r"`([^`]+)`", imports_cell))
        named[layer] = set(named) if imports_cell.strip() == "every layer above" else imports
    assert named == {layer: LAYERS[layer] for layer in LAYERS if layer != "__init__"}


def test_the_architecture_page_is_drawn_from_the_source():
    """docs/architecture.md's folder tree and import graph are the source's, as drawn by
    scripts/draw_architecture.py (run it after moving a module)."""
    page = DRAW.PAGE.read_text(encoding="utf-8")
    assert DRAW.page_with(page, DRAW.generated()) == page, "run python scripts/draw_architecture.py"
    graph = DRAW.edges()
    assert graph["core"] == {"schemas"} and graph["loaders"] <= {"schemas"}
