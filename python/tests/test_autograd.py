import numpy as np
import pytest

import kiln


def test_backward_fills_grad():
    x = kiln.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])
    assert x.is_leaf and not y.is_leaf and y.grad_fn == "sum"


def test_grad_matches_finite_differences():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4))
    w = rng.standard_normal((4, 2))

    def f(x):
        return (kiln.ops.tanh(kiln.matmul(x, kiln.tensor(w))) ** 2).sum()

    x = kiln.tensor(a, dtype=kiln.float64, requires_grad=True)
    g = kiln.grad(f(x), x).numpy()
    eps = 1e-6
    numeric = np.zeros_like(a)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            up, down = a.copy(), a.copy()
            up[i, j] += eps
            down[i, j] -= eps
            numeric[i, j] = (f(kiln.tensor(up)).item() - f(kiln.tensor(down)).item()) / (2 * eps)
    np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-7)
    assert x.grad is None  # grad() leaves .grad alone


def test_no_grad_context_and_decorator():
    x = kiln.tensor([1.0], requires_grad=True)
    with kiln.no_grad():
        y = x * 2
    assert not y.requires_grad

    @kiln.no_grad()
    def double(t):
        return t * 2
    assert not double(x).requires_grad
    assert (x * 2).requires_grad


def test_value_and_grad_in_mindspore_shape():
    net = kiln.nn.Dense(3, 1)
    x = kiln.tensor(np.ones((2, 3), np.float32))

    def loss_fn(inputs):
        return (net(inputs) ** 2).mean()

    value, (gx, gw) = kiln.value_and_grad(loss_fn, grad_position=0, weights=net.trainable_params())(x)
    assert gx.shape == (2, 3) and len(gw) == 2
    assert gw[0].shape == (1, 3)
    value2, gw2 = kiln.value_and_grad(loss_fn, grad_position=None, weights=net.trainable_params())(x)
    np.testing.assert_allclose(value.numpy(), value2.numpy())
    np.testing.assert_allclose(gw[0].numpy(), gw2[0].numpy())
    with pytest.raises(ValueError, match="nothing to differentiate"):
        kiln.value_and_grad(loss_fn, grad_position=None)


def test_in_place_change_of_a_tensor_autograd_needs_is_refused():
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(kiln.Error, match="in-place"):
        x.fill_(0.0)
