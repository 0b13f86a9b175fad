"""Every notebook (those added later included) opens with the same Colab/Kaggle install cell, the
one kept in t4lib.notebook, and it clones the repository pyproject.toml declares."""
import json
import sys
from pathlib import Path

import pytest

from t4lib import notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _declared_repository() -> str:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def test_install_cell_clones_the_declared_repository():
    assert notebook.REPOSITORY_URL == _declared_repository()
    assert f'"{_declared_repository()}"' in notebook.INSTALL_CELL


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_first_code_cell_is_the_install_cell(path):
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    assert cells, f"{path.name} has no code cell"
    assert "".join(cells[0]["source"]) == notebook.INSTALL_CELL, (
        f"{path.name}: the first code cell differs from t4lib.notebook.INSTALL_CELL; paste that string")
