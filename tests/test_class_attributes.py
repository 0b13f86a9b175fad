"""Every attribute the library reads on a class it imports from itself exists (``Engine._graph_of`` after a move
that removed it fails here, on a CPU, rather than as a fallback or a recorded error on the GPU)."""
import ast
import importlib
import inspect
import pkgutil

import pytest

import t4lib


def _modules():
    for info in pkgutil.walk_packages(t4lib.__path__, "t4lib."):
        if not info.name.endswith(".__main__"):   # importing it runs the command line
            yield info.name


def _class_attribute_reads(mod):
    """``(class name, attribute, line)`` of each ``Name.attr`` whose ``Name`` the module imported from t4lib."""
    tree = ast.parse(inspect.getsource(mod))
    imported = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("t4lib"):
            for a in node.names:
                imported[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported:
            yield node.value.id, node.attr, node.lineno


@pytest.mark.parametrize("name", sorted(_modules()))
def test_attributes_read_on_imported_classes_exist(name):
    try:
        mod = importlib.import_module(name)
    except ImportError as e:   # an optional dependency this environment lacks
        pytest.skip(f"{name}: {e}")
    missing = []
    for local, attr, line in _class_attribute_reads(mod):
        obj = getattr(mod, local, None)
        if inspect.isclass(obj) and not hasattr(obj, attr):
            missing.append(f"{name}:{line}: {local}.{attr}")
    assert not missing, "attributes read on classes that have none: " + ", ".join(missing)
