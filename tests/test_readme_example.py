"""The README's install line and example, checked on this checkout (``bash run_all.sh test`` also runs them from
the built wheel in a fresh environment: tests/readme_example_check.py)."""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import readme_example_check as check  # noqa: E402
from test_install_cell import _pyproject  # noqa: E402

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_extra_carries_what_the_example_imports():
    extra = re.fullmatch(r"t4lib\[([a-z]+)\] @ git\+.*", check.pip_line(README)).group(1)
    reqs = " ".join(_pyproject()["project"]["optional-dependencies"][extra])
    assert "transformers" in reqs and "tokenizers" in reqs   # load() needs both
    assert "engine.generate(" in check.readme_example(README)


@pytest.mark.parametrize("out, ok", [
    ("weights 2.5 MiB -> 0.9 MiB\n 12 + 5 = 17. The answer is 17.<|endoftext|>\n", True),
    (" 12 + 5 = 17. The answer is 17.<|endoftext|>Question: A farm\n", False),   # text past EOS
    (" 12 + 5 = 17. The answer is 17. Question: A farm has\n", False),             # no EOS: cut by the length
    (" <abstain><|endoftext|>\n", False),
    ("", False),
])
def test_verdict(out, ok):
    assert (check.verdict(out) == []) == ok


def test_the_example_model_is_found_without_the_data_folder(tmp_path, monkeypatch):
    """An installed wheel has no data/: the preset resolves to the copy shipped in the package."""
    from t4lib.models import presets

    monkeypatch.setenv("T4LIB_DATA", str(tmp_path))
    path = presets.checkpoint_dir("tiny-cpu")
    assert path.parts[-3:] == ("models", "checkpoints", "tiny-cpu")
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    monkeypatch.delenv("T4LIB_DATA")
    assert presets.checkpoint_dir("tiny-cpu").parts[-3:] == ("data", "models", "tiny-cpu")
