"""The layers of drtp's packages, checked on every import of every module (docs/architecture.md, "Layers").

Each module belongs to one unit of one layer (:data:`LAYERS`, the most specific
prefix wins).  A module may import its own unit and any unit of a lower layer;
never a higher layer, never another unit of its own layer.  Every import
statement counts: at module level, inside functions (the lazy imports that keep
a command's start cheap) and under ``TYPE_CHECKING`` — a type-only import is
still an edge a reader follows, and the first step of a cycle.  Imports made
from a string at run time (``drtp.cli``'s table of commands, ``drtp.load_run``)
are not statements and are not checked here; they only go downward from the
command line and from the top-level package.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the source folders and the package each is installed as (setup.py's package_dir)
FOLDERS = {
    "drtp": "drtp",
    "master": "drtp.master",
    "client": "drtp.client",
    "plugins": "drtp.plugins",
    "analysis": "drtp.analysis",
    "slurm": "drtp.slurm",
}

# bottom first: (layer, {unit: module prefixes})
LAYERS: tuple[tuple[str, dict[str, tuple[str, ...]]], ...] = (
    (
        "shared",
        {
            "shared modules": (
                "drtp",  # the top-level package itself (its __version__; drtp.load_run is loaded by name)
                "drtp.errors",
                "drtp.exit_codes",
                "drtp.units",
                "drtp.yamlfile",
                "drtp.schema",
                "drtp.verbosity",
                "drtp.progress",
                "drtp.outputs",
                "drtp.config_overrides",
            )
        },
    ),
    (
        "records and grammars",
        {
            "drtp.replay": ("drtp.replay",),
            "registry grammar": ("drtp.registry.names", "drtp.registry.name_maps"),
        },
    ),
    ("config", {"drtp.config": ("drtp.config",)}),
    ("options and registry", {"drtp.cli_options": ("drtp.cli_options",), "drtp.registry": ("drtp.registry",)}),
    ("trace", {"drtp.trace": ("drtp.trace",)}),
    ("simulation", {"drtp.plugins": ("drtp.plugins",)}),
    ("analysis", {"drtp.analysis": ("drtp.analysis",)}),
    ("replay", {"drtp.master": ("drtp.master",), "drtp.client": ("drtp.client",)}),
    ("launchers", {"drtp.cluster": ("drtp.cluster", "drtp.slurm"), "drtp.cli": ("drtp.cli",)}),
)


class Place(NamedTuple):
    """Where a module sits: its layer's index (0 at the bottom), the layer's name, and its unit."""

    level: int
    layer: str
    unit: str


class Edge(NamedTuple):
    """One import statement: the file and line it is on, the importing module and the module it imports."""

    path: str
    line: int
    importer: str
    imported: str


def place(module: str) -> Place | None:
    """The layer and unit of ``module`` (the longest matching prefix; ``drtp`` alone matches only itself)."""
    best: tuple[int, Place] | None = None
    for level, (layer, units) in enumerate(LAYERS):
        for unit, prefixes in units.items():
            for prefix in prefixes:
                hit = module == prefix or (prefix != "drtp" and module.startswith(prefix + "."))
                if hit and (best is None or len(prefix) > best[0]):
                    best = (len(prefix), Place(level, layer, unit))
    return best[1] if best else None


def module_name(path: Path) -> str:
    """``master/run/plan.py`` → ``drtp.master.run.plan``; a package's ``__init__.py`` → the package."""
    rel = path.relative_to(ROOT)
    parts = [FOLDERS[rel.parts[0]], *rel.parts[1:-1]]
    if rel.stem != "__init__":
        parts.append(rel.stem)
    return ".".join(parts)


def source_files() -> list[Path]:
    return sorted(f for folder in FOLDERS for f in (ROOT / folder).rglob("*.py"))


def known_modules() -> set[str]:
    return {module_name(f) for f in source_files()}


def imports_of(source: str, path: str, importer: str, is_package: bool, known: set[str]) -> list[Edge]:
    """Every drtp module ``source`` imports, wherever the statement is (``ast.walk`` sees function bodies and
    ``if TYPE_CHECKING:`` blocks alike); ``from pkg import mod`` counts as an import of ``pkg.mod``."""
    edges = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the importer's package
                base = importer.split(".") if is_package else importer.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
        else:
            continue
        edges += [Edge(path, node.lineno, importer, t) for t in dict.fromkeys(targets) if t.split(".")[0] == "drtp"]
    return edges


def breach(edge: Edge) -> str | None:
    """None when ``edge`` keeps the layers; otherwise one line naming the file, the line and the rule broken."""
    src, dst = place(edge.importer), place(edge.imported)
    where = f"{edge.path}:{edge.line}: {edge.importer} imports {edge.imported}"
    if src is None:
        return f"{edge.path}: module {edge.importer} is in no layer: add it to LAYERS and docs/architecture.md"
    if dst is None:
        return f"{where}, which is in no layer"
    if src.unit == dst.unit or dst.level < src.level:
        return None
    if dst.level == src.level:
        return f"{where}: {src.unit} and {dst.unit} are peers in layer '{src.layer}' and never import each other"
    return f"{where}: layer '{src.layer}' ({src.unit}) may not import layer '{dst.layer}' ({dst.unit}) above it"


def all_edges() -> list[Edge]:
    known = known_modules()
    edges = []
    for f in source_files():
        rel = str(f.relative_to(ROOT))
        edges += imports_of(f.read_text(encoding="utf-8"), rel, module_name(f), f.name == "__init__.py", known)
    return edges


def test_every_import_keeps_the_layers():
    breaches = [why for edge in all_edges() if (why := breach(edge))]
    assert not breaches, "imports against the layers (docs/architecture.md, Layers):\n" + "\n".join(breaches)


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in known_modules() if place(m) is None)
    assert not unplaced, f"modules in no layer: {unplaced}"


def test_a_package_whose_modules_span_layers_imports_nothing_of_drtp_in_its_init():
    """Importing ``drtp.registry.names`` runs ``drtp/registry/__init__.py`` first: a package whose modules sit in
    several layers must not import from its ``__init__``, or its lowest module would pull in the highest."""
    known = known_modules()
    for f in source_files():
        if f.name != "__init__.py":
            continue
        package = module_name(f)
        levels = {place(m).level for m in known if m == package or m.startswith(package + ".")}
        if len(levels) > 1:
            rel = str(f.relative_to(ROOT))
            edges = imports_of(f.read_text(encoding="utf-8"), rel, package, True, known)
            assert not edges, f"{rel}: its modules span layers; it imports {[e.imported for e in edges]}"


# the checker itself: each case is an import the layer rule refuses, in each place a statement can hide
BACK_EDGES = {
    "module level": "from drtp.master.run.nodes import NodeLink\n",
    "inside a function": "def f():\n    from drtp.master.series.repeat import run_dirs_in\n",
    "under TYPE_CHECKING": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import drtp.master.run.plan\n",
    "from a package, a module": "from drtp.master import run\n",
}


@pytest.mark.parametrize("where", BACK_EDGES)
def test_the_check_refuses_an_import_upward_wherever_it_is(where):
    known = known_modules() | {"drtp.master.run"}
    edges = imports_of(BACK_EDGES[where], "drtp/trace/x.py", "drtp.trace.x", False, known)
    assert [e.imported.split(".")[:2] for e in edges] == [["drtp", "master"]]
    why = breach(edges[0])
    assert why is not None and why.startswith("drtp/trace/x.py:")
    assert "layer 'trace' (drtp.trace) may not import layer 'replay' (drtp.master) above it" in why


def test_the_check_refuses_peers_and_follows_relative_imports():
    known = known_modules()
    (edge,) = imports_of("from ..master.run import plan\n", "analysis/x.py", "drtp.analysis.x", False, known)
    assert edge.imported == "drtp.master.run.plan"
    assert "may not import layer 'replay' (drtp.master)" in breach(edge)
    (edge,) = imports_of("from drtp.client import executor\n", "analysis/x.py", "drtp.analysis.x", False, known)
    assert "may not import layer 'replay' (drtp.client) above it" in breach(edge)
    (edge,) = imports_of("from drtp.client import executor\n", "master/x.py", "drtp.master.x", False, known)
    assert "drtp.master and drtp.client are peers in layer 'replay'" in breach(edge)
    (edge,) = imports_of("from drtp.replay import outcome\n", "analysis/x.py", "drtp.analysis.x", False, known)
    assert breach(edge) is None
