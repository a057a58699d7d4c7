"""Graph mode on cells and functions written in Python."""
import numpy as np
import pytest

import kiln
from kiln import nn


class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(6, 8)
        self.fc2 = nn.Dense(8, 3)

    def construct(self, x):
        h = kiln.relu(self.fc1(x))
        if x.shape[0] > 1:  # Python control flow on a shape is fine while tracing
            h = h * 2.0
        return self.fc2(h)


def test_jit_cell_matches_eager_and_specialises_on_shapes():
    net = Block().set_train(False)
    compiled = kiln.jit(net)
    for batch in (4, 1, 4):
        x = kiln.randn((batch, 6))
        np.testing.assert_allclose(compiled(x).numpy(), net(x).numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.compiles == 2  # one graph per input shape, reused after
    assert "matmul" in compiled.graph or "linear" in compiled.graph


def test_jit_function_of_tensors():
    @kiln.jit
    def gelu_sum(a, b):
        return (kiln.ops.gelu(a) * b).sum(axis=1)

    a, b = kiln.randn((3, 5)), kiln.randn((3, 5))
    eager = (kiln.ops.gelu(a) * b).sum(axis=1)
    np.testing.assert_allclose(gelu_sum(a, b).numpy(), eager.numpy(), rtol=1e-5, atol=1e-6)


def test_jit_pads_a_dynamic_axis_to_buckets_and_cuts_the_outputs_back():
    net = nn.Dense(6, 3)
    net.set_train(False)
    compiled = kiln.jit(net, dynamic=[{"input": 0, "axis": 0, "buckets": [4, 8]}])
    for batch in range(1, 9):
        x = kiln.randn((batch, 6))
        y = compiled(x)
        assert y.shape == (batch, 3)
        np.testing.assert_allclose(y.numpy(), net(x).numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.compiles == 2  # one graph per bucket
    with pytest.raises(kiln.Error, match="past its largest bucket"):
        compiled(kiln.randn((9, 6)))
    with pytest.raises(ValueError, match="unknown key 'bucket'"):
        kiln.jit(net, dynamic=[{"input": 0, "bucket": [4]}])(kiln.randn((2, 6)))
    with pytest.raises(TypeError, match=r"\(input, axis\) pairs"):
        kiln.jit(net, dynamic=0)(kiln.randn((2, 6)))


def test_generator_dataset_reads_a_generator_function():
    def samples():
        for i in range(10):
            yield np.full((2,), i, np.float32), np.int64(i % 2)

    data = kiln.dataset.GeneratorDataset(samples, ["data", "label"], shuffle=False).batch(4)
    batches = list(data)
    assert [b[0].shape for b in batches] == [(4, 2), (4, 2), (2, 2)]
    assert batches[0][1].numpy().tolist() == [0, 1, 0, 1]
    assert data.get_dataset_size() == 3


def test_set_inputs_with_none_dims_makes_those_axes_dynamic(capfd, tmp_path):
    # MindSpore's form: a None dimension varies; the rest are fixed.
    net = nn.SequentialCell(nn.Dense(4, 3))
    net.set_train(False)
    net.set_inputs(kiln.Tensor(shape=[None, 4], dtype=kiln.float32))
    declared = net.get_inputs()[0]
    assert declared.shape == (1, 4) and declared.dtype == kiln.float32
    compiled = kiln.jit(net)
    for batch in (2, 5, 3):
        x = kiln.randn((batch, 4))
        np.testing.assert_allclose(compiled(x).numpy(), net(x).numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.compiles == 1  # the graph is symbolic in the None axis: each batch size reuses it
    assert "compiled again" not in capfd.readouterr().err  # expected sizes, not a mistake
    with pytest.raises(ValueError, match=r"input 0 is kiln.float32 \[2, 5\]; set_inputs declared kiln.float32 \[None, 4\]"):
        compiled(kiln.randn((2, 5)))
    with pytest.raises(TypeError, match="set_inputs takes Tensors"):
        net.set_inputs([None, 4])

    # Graph-mode training with a short last batch: the batch axis is dynamic,
    # declared or not, and the step's graph, symbolic in it, runs the last
    # batch too.
    x = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    kiln.set_context(mode=kiln.GRAPH_MODE)
    try:
        for declare in (False, True):
            net = nn.SequentialCell(nn.Dense(4, 2))
            if declare:
                net.set_inputs(kiln.Tensor(shape=[None, 4], dtype=kiln.float32))
            model = kiln.train.Model(net, loss_fn=nn.CrossEntropyLoss(), optimizer=nn.SGD(net.trainable_params(), 0.1))
            capfd.readouterr()
            model.train(1, kiln.dataset.NumpySlicesDataset((x, y), shuffle=False).batch(4))
            err = capfd.readouterr().err
            assert model.compiled_graphs[0] == 1  # batches of 4, then the last one of 2 on the same graph
            assert "compiled again" not in err, err
    finally:
        kiln.set_context(mode=kiln.PYNATIVE_MODE)

    # Exported with a None batch, the model takes any batch.
    path = kiln.export(net, kiln.randn((2, 4)), file_name=str(tmp_path / "net"))
    session = kiln.InferenceSession(str(tmp_path / "net.onnx"))
    assert session.run([kiln.randn((7, 4))])[0].shape == (7, 2)
    del path
    wide = nn.SequentialCell(nn.Dense(4, 2))
    wide.set_inputs(kiln.Tensor(shape=[2, None], dtype=kiln.float32))
    with pytest.raises(ValueError, match="exports a dynamic batch \\(axis 0\\) only"):
        kiln.export(wide, kiln.randn((2, 4)), file_name=str(tmp_path / "wide"))
