"""tf_ring's Python modules import each other in layers: no module reaches,
directly or through others, back to itself. Lazy imports inside functions
count too (they hide a circle rather than remove it). Reads the sources
with ast; imports nothing."""
import ast
import os

from conftest import REPO as ROOT

PACKAGES = ("tf_ring", "tf_ring_engine")


def _module_name(path):
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _modules():
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    found[_module_name(path)] = path
    return found


def _imports(path, name, modules):
    """tf_ring modules that `name` imports (a package's own __init__ excluded
    for its submodules: importing a.b runs a, but a importing a.b is the
    package exporting its parts, not a circle)."""
    tree = ast.parse(open(path).read(), path)
    is_package = path.endswith("__init__.py")
    package = name if is_package else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = base + "." + alias.name
                targets.add(full if full in modules else base)
    return {t for t in targets if t in modules and t != name}


def _graph():
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_edge(a, b):
    # A package importing its own submodule (to export it) is its interface,
    # and a submodule importing a sibling through the package is resolved to
    # the sibling above; what is left between a package and its parts is not a circle.
    return b.startswith(a + ".") or a.startswith(b + ".")


def test_no_import_circles():
    graph = {v: {w for w in ws if not _package_edge(v, w)} for v, ws in _graph().items()}
    assert _cycles(graph) == []


def test_the_checker_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_imports():
    graph = _graph()
    assert "tf_ring.runtime.basics" in graph and graph["tf_ring.runtime.basics"]


# The rooms of tf_ring (docs/architecture.md) and what each may import
# besides itself: a floor never reaches a floor above it or a room beside it,
# so each can be read, changed and tested without the ones above. The two
# stacks share only tf_ring.plumbing: the ranks' side (runtime, collectives,
# training, keras, elastic) and the launcher's (run, elastic_driver) never
# import each other (the launcher starts without TensorFlow).
FLOOR = "tf_ring.plumbing"
RANKS = ("tf_ring.runtime", "tf_ring.collectives")
ROOMS = {
    "tf_ring.plumbing": (),
    "tf_ring.runtime": (FLOOR,),
    "tf_ring.collectives": (FLOOR, "tf_ring.runtime"),
    "tf_ring.training": (FLOOR,) + RANKS,
    "tf_ring.elastic": (FLOOR,) + RANKS,
    "tf_ring.keras": (FLOOR,) + RANKS + ("tf_ring.training", "tf_ring.elastic"),
    "tf_ring.hosted": (FLOOR,),
    "tf_ring.spark": (FLOOR, "tf_ring.hosted", "tf_ring.keras"),
    "tf_ring.ray": (FLOOR, "tf_ring.hosted"),
    "tf_ring.elastic_driver": (FLOOR,),
    # --check-build reads the build's record, which needs no TensorFlow.
    "tf_ring.run": (FLOOR, "tf_ring.elastic_driver", "tf_ring.runtime._build_info"),
    "tf_ring.timeline": (),
    "tf_ring_engine": (),
}
# Entry modules at the top of tf_ring: the public API's map (__init__) and
# DistributedOptimizer's dispatch between training (v1) and tf_ring.keras.
ENTRY_MODULES = ("tf_ring", "tf_ring.distributed_optimizer")


def _room(module):
    return next((room for room in ROOMS if module == room or module.startswith(room + ".")), None)


def _upward_imports(graph):
    found = []
    for module, targets in sorted(graph.items()):
        room = _room(module)
        if room is None:
            continue
        for target in sorted(targets):
            allowed = (room,) + ROOMS[room]
            if not any(target == a or target.startswith(a + ".") for a in allowed):
                found.append("%s imports %s" % (module, target))
    return found


def test_every_module_lives_in_a_room():
    homeless = sorted(m for m in _graph() if _room(m) is None and m not in ENTRY_MODULES)
    assert homeless == [], "put these in a room of ROOMS (docs/architecture.md): %s" % homeless


def test_rooms_import_only_the_floors_below_them():
    assert _upward_imports(_graph()) == []


def test_the_room_checker_finds_an_upward_import():
    graph = {"tf_ring.collectives.ops": {"tf_ring.training.tape", "tf_ring.runtime.basics"},
             "tf_ring.plumbing.env_names": set(), "tf_ring.run.launcher": {"tf_ring.keras"}}
    assert _upward_imports(graph) == ["tf_ring.collectives.ops imports tf_ring.training.tape",
                                      "tf_ring.run.launcher imports tf_ring.keras"]
