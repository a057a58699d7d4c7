"""Every registered op is reachable from Python, and ops agree with NumPy."""
import numpy as np
import pytest

import kiln

rng = np.random.default_rng(1)


def test_every_registered_op_is_a_function_and_documented():
    schemas = kiln._kiln.op_schemas()
    assert len(schemas) > 100
    for s in schemas:
        fn = getattr(kiln.ops, s["name"])
        assert callable(fn)
        assert s["name"] in fn.__doc__
        assert hasattr(kiln, s["name"]), s["name"]


def test_generated_functions_pass_attributes_and_refuse_unknown_ones():
    x = rng.standard_normal((3, 5)).astype(np.float32)
    e = np.exp(x - x.max(axis=0, keepdims=True))
    np.testing.assert_allclose(kiln.ops.softmax(x, axis=0).numpy(), e / e.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(kiln.ops.sum(x, axes=[1], keepdim=True).numpy(), x.sum(axis=1, keepdims=True),
                               rtol=1e-5)
    values, indices = kiln.ops.topk(x, k=2, axis=1)
    np.testing.assert_array_equal(indices.numpy(), np.argsort(-x, axis=1)[:, :2])
    with pytest.raises(TypeError, match=r"kiln.softmax\(\) has no argument 'axiss'; did you mean axis="):
        kiln.ops.softmax(x, axiss=0)
    with pytest.raises(TypeError, match="attribute 'axis' takes int"):
        kiln.ops.softmax(x, axis="first")


UNARY = {
    "abs": np.abs, "exp": np.exp, "log": lambda a: np.log(np.abs(a) + 0.5), "sqrt": lambda a: np.sqrt(np.abs(a)),
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "neg": np.negative, "floor": np.floor, "ceil": np.ceil,
    "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "relu": lambda a: np.maximum(a, 0), "sign": np.sign,
    "atan": np.arctan, "asinh": np.arcsinh, "log1p": lambda a: np.log1p(np.abs(a)),
}
PREP = {"log": lambda a: np.abs(a) + 0.5, "sqrt": np.abs, "log1p": np.abs}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_match_numpy(name):
    a = rng.standard_normal((4, 7)).astype(np.float32)
    arg = PREP.get(name, lambda v: v)(a)
    expected = UNARY[name](a) if name not in PREP else UNARY[name](a)
    got = getattr(kiln.ops, name)(arg).numpy()
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
          "minimum": np.minimum, "pow": lambda a, b: np.power(np.abs(a), b), "eq": np.equal, "lt": np.less,
          "ge": np.greater_equal}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_ops_broadcast_like_numpy(name, dtype):
    a = rng.standard_normal((2, 3, 4)).astype(dtype)
    b = (rng.standard_normal((3, 1)) + 3).astype(dtype)
    if name == "pow":
        a = np.abs(a)
    got = getattr(kiln.ops, name)(a, b).numpy()
    np.testing.assert_allclose(got, BINARY[name](a, b), rtol=1e-5)


def test_reductions_and_shape_ops_match_numpy():
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(kiln.ops.mean(a, axes=[0, 2]).numpy(), a.mean(axis=(0, 2)), rtol=1e-5)
    np.testing.assert_allclose(kiln.ops.amax(a, axes=[1]).numpy(), a.max(axis=1))
    np.testing.assert_allclose(kiln.ops.var(a, axes=[2]).numpy(), a.var(axis=2, ddof=1), rtol=1e-4)
    np.testing.assert_allclose(kiln.ops.cumsum(a, axis=1).numpy(), a.cumsum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kiln.concat([a, a], axis=1).numpy(), np.concatenate([a, a], axis=1))
    np.testing.assert_allclose(kiln.stack([a, a]).numpy(), np.stack([a, a]))
    np.testing.assert_allclose(kiln.ops.where(a > 0, a, 0.0).numpy(), np.where(a > 0, a, 0))
    np.testing.assert_allclose(kiln.einsum("ijk,ikl->ijl", a, a.transpose(0, 2, 1)).numpy(),
                               a @ a.transpose(0, 2, 1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(kiln.matmul(a[0], a[1].T).numpy(), a[0] @ a[1].T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kiln.ops.tril(a[0]).numpy(), np.tril(a[0]))


def test_conv2d_matches_a_direct_sum():
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    got = kiln.conv2d(x, w, padding=[1]).numpy()
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 3, 5, 5), np.float32)
    for o in range(3):
        for i in range(5):
            for j in range(5):
                want[0, o, i, j] = (padded[0, :, i:i + 3, j:j + 3] * w[o]).sum()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_fast_arithmetic_functions_take_numbers():
    t = kiln.tensor([1.0, 2.0])
    assert kiln.add(t, 1).numpy().tolist() == [2.0, 3.0]
    assert kiln.mul(t, 0.5).numpy().tolist() == [0.5, 1.0]
    assert kiln.sub(3.0, t).numpy().tolist() == [2.0, 1.0]


def test_unknown_op_lists_close_names():
    with pytest.raises(kiln.Error, match="softmax"):
        kiln._kiln.call_op("softmaks", [kiln.ones(2)], {})
