"""The package installs with pip from the checkout (no network) and carries its type stubs."""
import ast
import os
import subprocess
import sys

import kiln

ROOT = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def test_stubs_cover_every_op_and_parse():
    package = os.path.dirname(kiln.__file__)
    for name in ("_kiln.pyi", "ops.pyi", "__init__.pyi"):
        with open(os.path.join(package, name)) as f:
            tree = ast.parse(f.read())
        assert tree.body, name
    with open(os.path.join(package, "ops.pyi")) as f:
        ops_stub = f.read()
    for op in kiln.ops.__all__:
        if not kiln.ops.SCHEMAS[op]["package"]:  # packages loaded at run time are not in the stubs
            assert f"def {op}(" in ops_stub, op
    with open(os.path.join(package, "_kiln.pyi")) as f:
        assert "class Tensor" in f.read()
    assert "\n" in kiln.nn.Dense.__doc__ or kiln.nn.Dense.__doc__  # help() has something to read


def source_tree_state():
    """What pip could leave in the checkout: the entries of build/ and python/, and ./build's Python."""
    entries = set(os.listdir(os.path.join(ROOT, "build")))
    entries |= {"python/" + e for e in os.listdir(os.path.join(ROOT, "python"))}
    with open(os.path.join(ROOT, "build", "CMakeCache.txt")) as f:
        python = [line for line in f if line.startswith("Python_EXECUTABLE:")]
    return entries, python


def test_pip_install_without_network(tmp_path):
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
           "--target", str(target), ROOT]
    before = source_tree_state()
    result = subprocess.run(pip, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    after = source_tree_state()
    assert after[0] - before[0] == set(), "pip install wrote into the source tree"
    assert after[1] == before[1], "pip install re-pointed ./build at another Python"
    installed = target / "kiln"
    assert (installed / "libkiln.so").exists() and (installed / "ops.pyi").exists()
    probe = ("import kiln, numpy as np\n"
             "x = kiln.tensor(np.arange(4.0, dtype=np.float32))\n"
             "print((x * 2).sum().item())\n"
             "print([l.split()[-1] for l in open('/proc/self/maps') if 'libkiln.so' in l][0])\n")
    env = dict(os.environ, PYTHONPATH=str(target))
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    total, library = run.stdout.split()
    assert float(total) == 12.0
    assert library.startswith(str(installed))  # the package's own copy of libkiln, found beside the extension
