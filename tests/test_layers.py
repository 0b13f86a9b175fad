"""Dependencies point one way: kernels <- ops <- quant <- serving. Each check runs in a fresh
interpreter, so no module imported earlier by the test session hides an import."""
import subprocess
import sys


OPS = ["t4lib.ops.w4a16", "t4lib.ops.int4", "t4lib.ops.int3", "t4lib.ops.gguf", "t4lib.ops.fp8",
       "t4lib.ops.swizzle", "t4lib.ops.deltanet", "t4lib.ops.int8_activations"]


def _loaded_after(*modules: str) -> set[str]:
    code = (f"import sys, {', '.join(modules)}; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('t4lib.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_ops_import_neither_quant_nor_serving():
    """In particular importing t4lib.ops.w4a16 (which once took QuantizedWeight from t4lib.quant) does not
    import t4lib.quant."""
    loaded = _loaded_after(*OPS)
    assert set(OPS) <= loaded
    upward = {m for m in loaded if m.startswith(("t4lib.quant", "t4lib.serving", "t4lib.models"))}
    assert not upward, f"importing the op families imports {sorted(upward)}"


def test_quant_does_not_import_serving():
    loaded = _loaded_after("t4lib.quant")
    assert not {m for m in loaded if m.startswith("t4lib.serving")}


def test_w4a16_format_is_one_type_everywhere():
    from t4lib.ops.w4a16 import QuantizedWeight as ops_qw
    from t4lib.ops.w4a16.format import QuantizedWeight as fmt_qw
    from t4lib.quant import QuantizedWeight as quant_qw
    from t4lib.quant.w4a16 import (
        QuantizedWeight as quant_w4a16_qw, pack_int4_rows, unpack_int4_rows,
    )

    assert ops_qw is fmt_qw is quant_qw is quant_w4a16_qw
    assert pack_int4_rows.__module__ == unpack_int4_rows.__module__ == "t4lib.ops.w4a16.format"



def test_no_op_module_imports_upward_even_lazily():
    """Also imports inside functions (benches): whole-model benches live with the models they measure."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    upward = ("t4lib.models", "t4lib.serving", "t4lib.quant", "t4lib.train", "t4lib.speculative")
    bad = []
    for path in (root / "t4lib" / "ops").rglob("*.py"):
        package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                names = [".".join(base + ([node.module] if node.module else []))]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            bad += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if n.startswith(upward)]
    assert not bad, f"op modules importing upward: {bad}"
