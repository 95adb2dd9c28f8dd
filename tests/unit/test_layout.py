"""The tree keeps the shape docs/architecture.md describes: small files,
the engine's folders as layers, the bottom layers free of the ones above."""
import os
import re

from conftest import REPO as ROOT

COMMON = os.path.join(ROOT, "cc", "common")
MAX_LINES = 500
INCLUDE = re.compile(r'#include "common/([^"]+)"')


def _files(*folders, suffixes=(".py", ".cc", ".h", ".sh")):
    for folder in folders:
        for where, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in names:
                if name.endswith(suffixes):
                    yield os.path.join(where, name)


def test_no_source_file_is_over_500_lines():
    long = {os.path.relpath(p, ROOT): n for p in _files("cc", "tf_ring", "tf_ring_engine")
            for n in [sum(1 for _ in open(p, errors="replace"))] if n > MAX_LINES}
    assert long == {}


def test_the_top_of_cc_common_holds_only_the_engine():
    top = sorted(f for f in os.listdir(COMMON) if os.path.isfile(os.path.join(COMMON, f)))
    assert len(top) <= 6, top
    assert all(f.startswith(("engine", "operation_manager")) for f in top), top


def _includes_of(folder):
    found = {}
    for path in _files(os.path.join("cc", "common", folder), suffixes=(".cc", ".h")):
        found[os.path.relpath(path, COMMON)] = INCLUDE.findall(open(path).read())
    return found


def test_bottom_layers_include_nothing_above_them():
    # folder -> the folders its files may include from
    allowed = {"base": ("base/",), "reduction": ("base/", "reduction/"),
               "observability": ("base/", "observability/")}
    for folder, prefixes in allowed.items():
        included = _includes_of(folder)
        assert included, folder
        upward = {f: [i for i in incs if not i.startswith(prefixes)] for f, incs in included.items()}
        assert {f: i for f, i in upward.items() if i} == {}, folder


def test_every_include_names_an_existing_file():
    for path in _files("cc", os.path.join("tests", "cc"), suffixes=(".cc", ".h")):
        for inc in INCLUDE.findall(open(path).read()):
            assert os.path.exists(os.path.join(COMMON, inc)), (path, inc)


def test_python_reaches_the_engine_only_through_the_binding():
    """cc/python/ is the one seam: the engine includes nothing of it, and no
    Python package declares C entry points of its own (ctypes)."""
    for path in _files(os.path.join("cc", "common"), suffixes=(".cc", ".h")):
        text = open(path).read()
        assert '#include "python/' not in text and "pybind11" not in text, path
    for path in _files("tf_ring", "tf_ring_engine", suffixes=(".py",)):
        assert not re.search(r"^\s*(import|from) ctypes", open(path).read(), re.M), path


TF_RING = os.path.join(ROOT, "tf_ring")


def test_the_top_of_tf_ring_holds_the_api_and_at_most_three_entry_modules():
    """Everything else lives in a room (docs/architecture.md; the rooms'
    imports are checked in test_import_graph.py)."""
    top = sorted(f for f in os.listdir(TF_RING) if f.endswith(".py"))
    assert "__init__.py" in top and len(top) <= 4, top


def _string_constants(path):
    import ast
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.Constant) and node.value == 75 and type(node.value) is int:
            yield node.lineno, node.value


def test_environment_names_and_exit_codes_are_defined_once():
    """Every TF_RING_* variable and the exit code 75 are spelled out in
    tf_ring/plumbing/env_names.py alone; everything else imports them."""
    home = os.path.join("tf_ring", "plumbing", "env_names.py")
    spelled = []
    for path in _files("tf_ring", suffixes=(".py",)):
        rel = os.path.relpath(path, ROOT)
        if rel == home:
            continue
        for line, value in _string_constants(path):
            if value == 75 or re.fullmatch(r"TF_RING_[A-Z0-9_]+", str(value)):
                spelled.append("%s:%d %s" % (rel, line, value))
    assert spelled == []
    names = [v for _, v in _string_constants(os.path.join(ROOT, home))
             if re.fullmatch(r"TF_RING_[A-Z0-9_]+", str(v))]
    assert len(names) == len(set(names)) > 20
