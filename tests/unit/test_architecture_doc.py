"""docs/architecture.md names every module: each Python module under tf_ring/
in its room's row, each .cc file under cc/ in its folder's row (a file's
name, without .py or .cc, in a `code` span there). A module added without a
word in the map fails here, naming it."""
import os
import re

from conftest import REPO

DOC = os.path.join(REPO, "docs", "architecture.md")
# Files that are their room rather than a module in it.
NOT_MODULES = ("__init__.py", "__main__.py")


def _rows():
    """Table row -> the identifiers in its code spans, for every table row
    whose first cell names folders (`cc/common/negotiation/`, `spark/`, `ray/`)."""
    rows = {}
    for line in open(DOC, encoding="utf-8"):
        cells = line.split("|")
        if not line.startswith("|") or len(cells) < 3:
            continue
        tokens = set(re.findall(r"[A-Za-z0-9_]+", " ".join(re.findall(r"`([^`]*)`", cells[2]))))
        for folder in re.findall(r"`([^`]+/)`", cells[1]):
            rows.setdefault(folder, set()).update(tokens)
    return rows


def _stem(name):
    return name.rsplit(".", 1)[0]


def _modules(top, suffix):
    for where, folders, names in os.walk(os.path.join(REPO, top)):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        for name in sorted(names):
            if name.endswith(suffix) and name not in NOT_MODULES:
                yield os.path.relpath(where, REPO), name


def _missing():
    rows, text = _rows(), open(DOC, encoding="utf-8").read()
    missing = []
    for folder, name in _modules("tf_ring", ".py"):
        parts = folder.split(os.sep)
        if len(parts) == 1:  # tf_ring's top: named in the prose
            found = "`%s`" % name in text
        else:
            found = _stem(name) in rows.get(parts[1] + "/", ())
        if not found:
            missing.append(os.path.join(folder, name))
    for folder, name in _modules("cc", ".cc"):
        if _stem(name) not in rows.get(folder + "/", ()):
            missing.append(os.path.join(folder, name))
    return missing


def test_the_map_has_a_row_for_every_folder():
    rows = _rows()
    folders = {f + "/" for f, _ in _modules("cc", ".cc")}
    folders |= {f.split(os.sep)[1] + "/" for f, _ in _modules("tf_ring", ".py") if os.sep in f}
    assert sorted(folders - set(rows)) == []


def test_every_module_and_engine_file_is_named_in_its_folders_row():
    assert _missing() == [], "name these in their folder's row of docs/architecture.md"
