"""CPU tier: the package stands alone. Nothing in cugemm8/ imports torch, at any time; JAX is imported only
inside cugemm8.jax's functions; importing cugemm8 and every module of it loads neither."""
import ast
import pathlib
import subprocess
import sys

import cugemm8

PACKAGE = pathlib.Path(cugemm8.__file__).parent


def _imports(tree: ast.AST):
    """(module name, the function it sits in or None) for every import statement."""
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Import):
                found.extend((alias.name, function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0:
                found.append((child.module or "", function))
            visit(child, inner)

    visit(tree, None)
    return found


def test_no_torch_and_jax_only_lazily():
    for path in sorted(PACKAGE.glob("*.py")):
        for module, function in _imports(ast.parse(path.read_text())):
            root = module.partition(".")[0]
            assert root != "torch", f"{path.name} imports {module}"
            if root == "jax":
                assert path.name == "jax.py" and function is not None, f"{path.name} imports {module} at import time"


def test_importing_every_module_loads_neither():
    modules = ", ".join(f"cugemm8.{p.stem}" for p in sorted(PACKAGE.glob("*.py")) if p.stem != "__main__")
    code = f"import sys, {modules}; print(sorted(m for m in ('torch', 'jax', 'jaxlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
