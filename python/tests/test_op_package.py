"""Op packages load from Python: their ops become kiln.ops functions with gradients."""
import os

import numpy as np
import pytest

import kiln

PACKAGE = os.environ.get("KILN_TEST_CUSTOM_OPS", "")
needs_package = pytest.mark.skipif(not os.path.exists(PACKAGE),
                                   reason="the example package is built by ctest's custom_op_package_build")


@needs_package
def test_a_loaded_package_adds_functions_with_gradients():
    assert kiln.load_op_library(PACKAGE) == "custom_ops"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    w = rng.standard_normal(6).astype(np.float32)
    want = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(kiln.ops.rms_norm(x, w).numpy(), want, rtol=1e-5, atol=1e-6)
    gate = kiln.tensor(rng.standard_normal((2, 5)).astype(np.float32), requires_grad=True)
    up = kiln.tensor(rng.standard_normal((2, 5)).astype(np.float32))
    kiln.swiglu(gate, up).sum().backward()
    g, s = gate.numpy(), 1 / (1 + np.exp(-gate.numpy()))
    np.testing.assert_allclose(gate.grad.numpy(), up.numpy() * s * (1 + g * (1 - s)), rtol=1e-5, atol=1e-6)
    assert "From the op package ``custom_ops``" in kiln.ops.rms_norm.__doc__


def test_a_file_that_is_not_a_package_is_refused_by_name(tmp_path):
    fake = tmp_path / "libfake.so"
    fake.write_text("not a library")
    with pytest.raises(kiln.Error, match="libfake.so cannot be loaded"):
        kiln.load_op_library(fake)
    with pytest.raises(kiln.Error, match="no such file"):
        kiln.load_op_library(tmp_path / "missing.so")
