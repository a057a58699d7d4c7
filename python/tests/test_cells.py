import numpy as np
import pytest

import kiln
from kiln import nn


class SimpleNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.dense_relu_sequential = nn.SequentialCell(
            nn.Dense(28 * 28, 64), nn.ReLU(), nn.Dense(64, 10))

    def construct(self, x):
        return self.dense_relu_sequential(self.flatten(x))


class Scale(nn.Cell):
    """A Python cell with a parameter of its own, used inside C++ cells."""

    def __init__(self, n):
        super().__init__()
        self.gain = nn.Parameter(kiln.ones(n), name="gain")
        self.steps = nn.Parameter(kiln.zeros((), kiln.int64), requires_grad=False)

    def construct(self, x):
        return x * self.gain


def test_attributes_register_parameters_and_cells():
    net = SimpleNet()
    names = [n for n, _ in net.parameters_and_names()]
    assert names == ["dense_relu_sequential.0.weight", "dense_relu_sequential.0.bias",
                     "dense_relu_sequential.2.weight", "dense_relu_sequential.2.bias"]
    assert len(net.trainable_params()) == 4
    assert net(kiln.zeros((2, 1, 28, 28))).shape == (2, 10)
    assert "SimpleNet" in repr(net) and "Dense" in repr(net)


def test_python_cells_inside_cpp_cells_and_back():
    inner = Scale(4)
    seq = nn.SequentialCell([nn.Dense(3, 4), inner, nn.ReLU()])
    outer = nn.SequentialCell(seq)
    names = [n for n, _ in outer.parameters_and_names()]
    assert "0.1.gain" in names and "0.1.steps" in names
    trainable = [n for n, t in outer.parameters_and_names() if t.requires_grad]
    assert "0.1.steps" not in trainable
    y = outer(kiln.ones((2, 3)))
    y.sum().backward()
    assert inner.gain.grad is not None and inner.gain.grad.shape == (4,)
    del inner  # the Python half of a cell held only by C++ cells stays alive
    assert outer(kiln.ones((1, 3))).shape == (1, 4)


def test_multiple_inputs_go_to_construct():
    class Add(nn.Cell):
        def construct(self, a, b):
            return a + b
    assert Add()(kiln.ones(2), kiln.ones(2)).numpy().tolist() == [2.0, 2.0]


def test_set_train_switches_dropout():
    net = nn.SequentialCell(nn.Dropout(p=0.5))
    x = kiln.ones((1000,))
    assert net.set_train(False) is net
    np.testing.assert_array_equal(net(x).numpy(), x.numpy())
    net.set_train(True)
    assert (net(x).numpy() == 0).sum() > 300


def test_mindspore_layer_defaults():
    conv = nn.Conv2d(1, 4, 3)  # pad_mode="same", no bias
    assert conv(kiln.zeros((1, 1, 8, 8))).shape == (1, 4, 8, 8)
    assert [n for n, _ in conv.parameters_and_names()] == ["weight"]
    assert nn.Conv2d(1, 4, 3, pad_mode="valid", has_bias=True)(kiln.zeros((1, 1, 8, 8))).shape == (1, 4, 6, 6)
    assert nn.MaxPool2d(kernel_size=2, stride=2)(kiln.zeros((1, 1, 8, 8))).shape == (1, 1, 4, 4)
    with pytest.raises(ValueError, match="odd kernel_size"):
        nn.Conv2d(1, 1, 2)
    lstm = nn.LSTM(3, 5, batch_first=True)
    out, (h, c) = lstm(kiln.zeros((2, 7, 3)))
    assert out.shape == (2, 7, 5) and h.shape == (1, 2, 5) and c.shape == (1, 2, 5)
    dense = nn.Dense(2, 2, weight_init="zeros", bias_init="ones")
    assert dense(kiln.ones((1, 2))).numpy().tolist() == [[1.0, 1.0]]


def test_embedding_padding_row_is_zero_and_untrained():
    table = nn.Embedding(5, 3, embedding_table="ones", padding_idx=-1)  # the last row, as in PyTorch
    np.testing.assert_array_equal(table.weight.numpy()[4], [0, 0, 0])
    table(kiln.tensor([[4, 1], [4, 0]])).sum().backward()
    grad = table.weight.grad.numpy()
    np.testing.assert_array_equal(grad[4], [0, 0, 0])
    np.testing.assert_array_equal(grad[1], [1, 1, 1])
    with pytest.raises(ValueError, match="padding_idx 5"):
        nn.Embedding(5, 3, padding_idx=5)


def test_dense_applies_its_activation_by_name_or_cell():
    x = kiln.tensor(np.linspace(-8, 8, 12, dtype=np.float32).reshape(3, 4))
    plain = nn.Dense(4, 5)
    w, b = plain.weight.numpy(), plain.bias.numpy()
    z = x.numpy() @ w.T + b
    expected = {"relu": np.maximum(z, 0), "relu6": np.clip(z, 0, 6), "sigmoid": 1 / (1 + np.exp(-z)),
                "tanh": np.tanh(z), "hswish": z * np.clip(z + 3, 0, 6) / 6,
                "softmax": np.exp(z) / np.exp(z).sum(-1, keepdims=True)}
    for name, want in expected.items():
        dense = nn.Dense(4, 5, weight_init=kiln.tensor(w), bias_init=kiln.tensor(b), activation=name)
        np.testing.assert_allclose(dense(x).numpy(), want, rtol=1e-5, atol=1e-6, err_msg=name)
    # The activation is a child cell with no parameters: the names stay MindSpore's.
    dense = nn.Dense(4, 5, activation=nn.ReLU())
    assert [n for n, _ in dense.parameters_and_names()] == ["weight", "bias"]
    assert "activation" in dense.name_cells() and "ReLU" in repr(dense)
    # A Python cell works too, and gradients flow through it.
    class Double(nn.Cell):
        def construct(self, y):
            return y * 2
    dense = nn.Dense(4, 5, activation=Double())
    dense(x).sum().backward()
    np.testing.assert_allclose(dense.bias.grad.numpy(), np.full(5, 6.0))
    with pytest.raises(ValueError, match="relu6"):
        nn.Dense(4, 5, activation="swishy")
    with pytest.raises(TypeError, match="a name such as 'relu' or a Cell"):
        nn.Dense(4, 5, activation=3)


def test_mistakes_are_named():
    class Forgot(nn.Cell):
        def __init__(self):
            pass
    with pytest.raises(TypeError, match="__init__"):
        Forgot()

    class Listed(nn.Cell):
        def __init__(self):
            super().__init__()
            self.layers = [nn.Dense(2, 2)]
    with pytest.raises(TypeError, match="CellList"):
        Listed()

    class NoConstruct(nn.Cell):
        pass
    with pytest.raises(NotImplementedError, match="construct"):
        NoConstruct()(kiln.ones(1))
