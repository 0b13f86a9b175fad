"""The committed notebooks as a user opens them: one parameters cell that leaves PROFILE to ``auto``, and no
cell papermill injects with ``-p`` (it would pin the profile of a Colab "Run all" to the one it was run with)."""
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _tagged(nb, tag):
    return [c for c in nb["cells"] if tag in c.get("metadata", {}).get("tags", [])]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_leaves_the_profile_to_auto(path):
    nb = json.loads(path.read_text())
    assert not _tagged(nb, "injected-parameters"), (
        f"{path.name} carries papermill's injected parameters; execute it without -p (PROFILE auto picks cpu here)")
    params = _tagged(nb, "parameters")
    assert len(params) == 1, f"{path.name}: {len(params)} cells tagged 'parameters'"
    assert 'PROFILE = "auto"' in "".join(params[0]["source"])


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 6
