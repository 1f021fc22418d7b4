"""The import graph the design relies on, read from the source with `ast`.

The pipeline's stage modules are siblings: none imports another, and only the pipeline (and its
entry points) imports them; everything they share lives below them. `schemas` is the contract
and imports neither half; the loader never imports the builder (training hosts need no Beam).
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("beam_pipeline", "schemas", "loaders")
STAGES = {f"beam_pipeline.{name}" for name in ("discovery", "labelling", "writing", "finalize")}
# `plan` runs the stages' own functions in one process, so it sits above them with the pipeline.
ABOVE_STAGES = {"beam_pipeline.pipeline", "beam_pipeline.tools.build", "beam_pipeline.tools.plan"}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """The project modules `path` imports (`from pkg import module` counts as the module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                if (ROOT / (candidate.replace(".", "/") + ".py")).exists():
                    found.add(candidate)
    return {name for name in found if name.split(".")[0] in PACKAGES}


GRAPH = {
    _module_name(path): _imports(path) - {_module_name(path)}
    for package in PACKAGES
    for path in sorted((ROOT / package).glob("*.py"))
}


def test_the_stage_modules_exist():
    assert set(GRAPH) >= STAGES


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_stage_module_imports_no_other_stage(stage):
    assert GRAPH[stage] & STAGES == set()


def test_only_the_pipeline_and_its_entry_points_import_the_stages():
    importers = {module for module, imports in GRAPH.items() if imports & STAGES}
    assert importers <= ABOVE_STAGES


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
