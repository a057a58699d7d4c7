import numpy as np
import pytest

import kiln


def test_numpy_round_trip_shares_memory():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = kiln.from_numpy(a)
    assert t.shape == (3, 4) and t.dtype == kiln.float32
    a[0, 0] = 42.0
    assert t[0, 0].item() == 42.0  # no copy on the way in
    back = t.numpy()
    back[2, 3] = -1.0
    assert a[2, 3] == -1.0  # nor on the way out
    assert np.shares_memory(back, a)


def test_strided_numpy_views_are_shared_and_read_in_logical_order():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    view = a[::2, 1::2]
    t = kiln.from_numpy(view)
    np.testing.assert_array_equal(t.numpy(), view)
    np.testing.assert_array_equal((t * 2).numpy(), view * 2)


def test_tensor_copies_and_from_numpy_does_not():
    a = np.ones(3, dtype=np.float32)
    copied, shared = kiln.tensor(a), kiln.from_numpy(a)
    a[:] = 5
    assert copied.numpy().tolist() == [1, 1, 1]
    assert shared.numpy().tolist() == [5, 5, 5]


def test_creation_and_dtypes():
    assert kiln.Tensor(shape=(1, 784), dtype=kiln.float32).shape == (1, 784)
    assert kiln.tensor([1, 2, 3]).dtype == kiln.int64
    assert kiln.tensor([1.5, 2.0]).dtype == kiln.float32  # Python floats are float32, as in MindSpore
    assert kiln.tensor([True, False]).dtype == kiln.bool_
    assert kiln.zeros((2, 3), kiln.int32).numpy().dtype == np.int32
    assert kiln.ones(4).numpy().sum() == 4
    np.testing.assert_allclose(kiln.arange(5).numpy(), np.arange(5, dtype=np.float32))
    np.testing.assert_allclose(kiln.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5), rtol=1e-6)
    assert kiln.eye(3).numpy().trace() == 3
    assert kiln.full((2,), 7.0).numpy().tolist() == [7.0, 7.0]
    assert kiln.tensor(np.arange(4), dtype="float64").dtype == kiln.float64
    assert kiln.tensor([1, 2]).astype(np.float16).dtype == kiln.float16
    assert kiln.tensor([1.0]).to(kiln.bfloat16).numpy().dtype == np.float32  # NumPy has no bfloat16


def test_basic_indexing_gives_views():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = kiln.from_numpy(a.copy())
    for key in [1, -1, (1, 2), (slice(None), 1), (Ellipsis, 2), (slice(0, 3, 2), None, slice(1, 4)),
                (None, 0, Ellipsis), (slice(5, 10),), (0, slice(None), -2)]:
        np.testing.assert_array_equal(t[key].numpy(), a[key], err_msg=str(key))
    v = t[1, 1:3]
    v.fill_(0.0)  # a view: writes land in t
    assert t.numpy()[1, 1:3].sum() == 0


def test_advanced_indexing_and_assignment():
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    t = kiln.tensor(a)
    np.testing.assert_array_equal(t[[2, 0, -1]].numpy(), a[[2, 0, -1]])
    np.testing.assert_array_equal(t[:, np.array([4, 1])].numpy(), a[:, [4, 1]])
    mask = a > 7
    np.testing.assert_array_equal(t[kiln.tensor(mask)].numpy(), a[mask])
    t[0] = 100.0
    t[1:3, 2] = kiln.tensor([7.0, 8.0])
    a[0] = 100.0
    a[1:3, 2] = [7.0, 8.0]
    np.testing.assert_array_equal(t.numpy(), a)
    with pytest.raises(IndexError):
        t[4]
    with pytest.raises(kiln.Error, match="index tensor"):
        t[[0, 1]] = 1.0


def test_arithmetic_broadcasts_like_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 1, 4)).astype(np.float32)
    b = rng.standard_normal((5, 1)).astype(np.float32)
    ta, tb = kiln.tensor(a), kiln.tensor(b)
    np.testing.assert_allclose((ta + tb).numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose((ta - tb).numpy(), a - b, rtol=1e-6)
    np.testing.assert_allclose((ta * tb).numpy(), a * b, rtol=1e-6)
    np.testing.assert_allclose((ta / (tb + 10)).numpy(), a / (b + 10), rtol=1e-6)
    np.testing.assert_allclose((2 * ta + 1).numpy(), 2 * a + 1, rtol=1e-6)
    np.testing.assert_allclose((1 - ta).numpy(), 1 - a, rtol=1e-6)
    np.testing.assert_allclose((ta ** 2).numpy(), a ** 2, rtol=1e-6)
    np.testing.assert_allclose((-ta).numpy(), -a)
    np.testing.assert_array_equal((ta > 0).numpy(), a > 0)
    m = rng.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose((ta @ kiln.tensor(m)).numpy(), a @ m, rtol=1e-5, atol=1e-5)
    i = kiln.tensor([7, -7, 5])
    assert (i // 2).numpy().tolist() == [3, -4, 2]  # floor division, as Python's
    assert (i % 3).numpy().tolist() == [1, 2, 2]
    assert (i / 2).numpy().tolist() == [3.5, -3.5, 2.5]  # true division of integers
    assert (i / kiln.tensor([2, 2, 2])).numpy().tolist() == [3.5, -3.5, 2.5]
    assert kiln.div(i, kiln.tensor([2, 2, 2])).dtype == kiln.int64  # the op itself keeps the dtype


def test_arithmetic_between_tensors_keeps_every_form_of_call():
    # Two tensors take a direct path past the binding; everything else must
    # still reach it: keywords, numbers, arrays, Parameters, wrong operands.
    a, b = kiln.tensor([1.0, 2.0]), kiln.tensor([4.0, 8.0])
    assert kiln.add(a, b).numpy().tolist() == [5.0, 10.0]
    assert kiln.sub(input=b, other=a).numpy().tolist() == [3.0, 6.0]
    assert kiln.mul(a, 3.0).numpy().tolist() == [3.0, 6.0]
    assert (b / np.float32(2)).numpy().tolist() == [2.0, 4.0]
    assert (10 - a).numpy().tolist() == [9.0, 8.0] and (8 / b).numpy().tolist() == [2.0, 1.0]
    p = kiln.nn.Parameter(kiln.tensor([1.0, 1.0]))
    assert (a - p).numpy().tolist() == [0.0, 1.0] and (p - a).numpy().tolist() == [0.0, -1.0]
    with pytest.raises(kiln.Error, match="cannot be broadcast"):
        a + kiln.ones(3)
    with pytest.raises(kiln.Error, match="cannot be broadcast"):
        kiln.mul(a, kiln.ones(3))
    with pytest.raises(TypeError):
        a * "x"
    a.requires_grad = True
    ((a * b) / b - a * a).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [1.0 - 2.0, 1.0 - 4.0])


def test_methods_and_reductions():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = kiln.tensor(a)
    np.testing.assert_allclose(t.sum().numpy(), a.sum())
    np.testing.assert_allclose(t.sum(axis=1).numpy(), a.sum(axis=1))
    np.testing.assert_allclose(t.mean(axis=(0, 2), keep_dims=True).numpy(), a.mean(axis=(0, 2), keepdims=True))
    np.testing.assert_allclose(t.max(axis=2).numpy(), a.max(axis=2))
    assert t.argmax().item() == 23
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), a.argmax(axis=1))
    np.testing.assert_allclose(t.exp().log().numpy(), a, rtol=1e-5, atol=1e-5)
    assert t.reshape(4, 6).shape == (4, 6) and t.reshape((-1,)).shape == (24,)
    np.testing.assert_array_equal(t.transpose(0, 2).numpy(), a.transpose(2, 1, 0))
    np.testing.assert_array_equal(t.transpose((1, 2, 0)).numpy(), a.transpose(1, 2, 0))
    np.testing.assert_array_equal(t.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    assert t.flatten(1).shape == (2, 12) and t.unsqueeze(0).shape == (1, 2, 3, 4)
    assert t.size == 24 and t.ndim == 3 and len(t) == 2
    assert [row.shape for row in t] == [(3, 4), (3, 4)]
    assert t.tolist() == a.tolist()
    assert float(kiln.tensor(2.5)) == 2.5 and int(kiln.tensor(3)) == 3
    assert "float32" in repr(t) or "[" in repr(t)


def test_wrong_input_is_a_clear_error():
    with pytest.raises(TypeError, match="expected numbers"):
        kiln.tensor(["a", "b"])
    with pytest.raises(kiln.Error, match="broadcast|shape"):
        kiln.ones((2, 3)) + kiln.ones((4,))
    with pytest.raises(kiln.Error, match="ambiguous"):
        bool(kiln.ones(3))
    with pytest.raises(TypeError, match="complex"):
        kiln.from_numpy(np.ones(2, dtype=np.complex64))


def test_dtypes_print():
    t = kiln.Tensor(np.zeros((2, 2), np.float32))
    assert str(t.dtype) == "kiln.float32"
    assert "float32" in repr(t.dtype)
    assert [str(d) for d in (kiln.int64, kiln.bool_)] == ["kiln.int64", "kiln.bool"]
    assert t.dtype.name == "float32"


def test_moving_to_a_device_this_build_lacks_says_so():
    t = kiln.Tensor(np.zeros((2,), np.float32))
    with pytest.raises(Exception, match="no cuda backend in this build"):
        t.to("cuda:0")
    with pytest.raises(Exception, match="unknown dtype 'floot32'"):
        t.to("floot32")
