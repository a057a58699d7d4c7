"""The Python API as MindSpore and NumPy users write it: shapes as ints, counts of bools, keyword
names, the wrapper cells and Model forms MindSpore code relies on, reprs, docstrings, and messages
whose fixes are written in Python."""
import os
import tempfile

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.train import Model, TopKCategoricalAccuracy
from kiln.dataset import NumpySlicesDataset


def test_shapes_as_ints_a_sequence_or_shape_and_a_dtype_after():
    assert kiln.randn(64, 1, 28, 28).shape == (64, 1, 28, 28)
    assert kiln.zeros((2, 3), kiln.int64).dtype == kiln.int64
    assert kiln.ones(4).shape == (4,)
    assert kiln.rand(shape=(2, 2)).shape == (2, 2)
    assert kiln.empty(3, 2, dtype=kiln.float64).dtype == kiln.float64
    with pytest.raises(TypeError, match=r"kiln.zeros\(\) takes a shape as ints or one sequence"):
        kiln.zeros(2, "3")


def test_a_bool_tensor_sums_to_a_count():
    t = kiln.Tensor(np.array([[True, False, True], [True, True, True]]))
    assert t.sum().item() == 5 and t.sum().dtype == kiln.int64
    assert t.sum(axis=1).numpy().tolist() == [2, 3]
    assert kiln.ops.sum(t).item() == 5


def test_keyword_names_of_other_frameworks_are_answered_with_kilns():
    x = kiln.randn(2, 3)
    with pytest.raises(TypeError, match=r"kiln.softmax\(\) has no argument 'dim'; did you mean axis=\?"):
        kiln.softmax(x, dim=1)
    # Tensor.sum takes axis=; the op's attribute is axes: both spellings work for both.
    assert np.allclose(kiln.ops.sum(x, axis=1).numpy(), x.sum(axis=1).numpy())
    assert np.allclose(kiln.ops.sum(x, axes=[1]).numpy(), x.numpy().sum(axis=1), atol=1e-6)


def test_layer_arguments_of_the_wrong_type_are_named():
    with pytest.raises(TypeError, match=r"nn.Dense: in_channels must be int, not str \('784'\)"):
        nn.Dense("784", 10)
    with pytest.raises(TypeError, match=r"nn.Conv2d: kernel_size"):
        nn.Conv2d(1, 8, kernel_size=3.5)


class TwoInputs(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 2)

    def construct(self, a, b):
        return self.fc(a) * 2 + self.fc(b)


def test_jit_compiles_a_cell_with_two_inputs_and_reads_its_weights_live():
    net = TwoInputs()
    a, b = kiln.randn(4, 3), kiln.randn(4, 3)
    compiled = kiln.jit(net)
    assert np.allclose(compiled(a, b).numpy(), net(a, b).numpy(), atol=1e-6)
    net.fc.weight.set_data(kiln.zeros(2, 3))
    assert np.allclose(compiled(a, b).numpy(), net(a, b).numpy(), atol=1e-6)


def small_data(n=256):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    return x, y


def test_mindspores_wrapper_cells_train_and_evaluate():
    x, y = small_data()
    net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2))
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.CrossEntropyLoss()), nn.Adam(net.trainable_params(), 0.01))
    losses = [step(kiln.tensor(x), kiln.tensor(y)).item() for _ in range(60)]
    assert losses[-1] < losses[0] / 3
    loss, outputs, label = nn.WithEvalCell(net, nn.CrossEntropyLoss())(kiln.tensor(x), kiln.tensor(y))
    assert outputs.shape == (256, 2) and label.shape == (256,)
    assert abs(loss.item() - losses[-1]) < 0.1


def test_parameters_dict_untrainable_params_and_state_dict():
    net = nn.SequentialCell(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Dense(4 * 8 * 8, 2))
    params = net.parameters_dict()
    assert list(params)[:2] == ["0.weight", "1.weight"] or "0.weight" in params
    assert all(p.requires_grad for p in params.values())
    net.freeze("3")
    assert {tuple(p.shape) for p in net.untrainable_params()} == {(2, 256), (2,)}
    state = net.state_dict()
    assert state["1.running_var"].tolist() == [1.0] * 4
    assert state["1.num_batches_tracked"].dtype == np.int64  # as PyTorch's batch norm has it
    assert isinstance(state["3.weight"], np.ndarray) and state["3.weight"].shape == (2, 256)


def test_an_evaluation_only_model_and_named_top_k():
    x, y = small_data(64)
    data = NumpySlicesDataset((x, y), ["x", "y"], shuffle=False).batch(16)
    net = nn.SequentialCell(nn.Dense(8, 4))
    model = Model(net, nn.CrossEntropyLoss(), metrics={"accuracy": TopKCategoricalAccuracy(1),
                                                         "top_3": TopKCategoricalAccuracy(3)})
    result = model.eval(data)
    assert 0.0 <= result["accuracy"] <= 1.0 and "loss" in result
    with pytest.raises(ValueError, match="has no optimizer, so it evaluates and predicts only"):
        model.train(1, data)
    trainable = Model(net, nn.CrossEntropyLoss(), nn.SGD(net.trainable_params(), 0.01))
    with pytest.raises(TypeError, match="unexpected keyword argument 'callbaks'"):
        trainable.train(1, data, callbaks=[])
    with pytest.raises(ValueError, match="'top_k_categorical_accuracy' needs its k"):
        Model(net, nn.CrossEntropyLoss(), metrics={"top_k_categorical_accuracy"})


def test_objects_print_what_they_are():
    net = nn.Dense(3, 2)
    shown = [repr(nn.SGD(net.trainable_params(), 0.1)), repr(nn.CrossEntropyLoss()), repr(nn.MSELoss("sum")),
             repr(Model(net, nn.CrossEntropyLoss())), repr(NumpySlicesDataset((np.zeros((10, 3)),)).batch(4))]
    for text in shown:
        assert "object at 0x" not in text, text
    assert shown[0] == "SGD(2 parameters, 8 values, learning_rate=0.1)"
    assert shown[2] == "MSELoss(reduction='sum')"
    assert "batch=4" in shown[4]


def test_every_public_nn_class_has_a_docstring_of_its_own():
    missing = []
    for name in nn.__all__:
        value = getattr(nn, name)
        if isinstance(value, type):
            doc = value.__dict__.get("__doc__")
            if not doc or not doc.strip():
                missing.append(name)
    assert not missing, f"kiln.nn classes without a docstring: {missing}"


class HoldsADict(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 3)
        self.extra = {"head": nn.Dense(3, 2)}  # a dict is not registered

    def construct(self, x):
        return self.extra["head"](self.fc(x))


def test_messages_give_their_fix_in_python():
    with pytest.raises(kiln.Error) as e:
        kiln.ops.matmul(kiln.randn(2, 3), kiln.ones((3, 2), kiln.float64))
    assert "x.astype(weight.dtype)" in str(e.value) and "weight.dtype()" not in str(e.value)
    with pytest.raises(kiln.Error) as e:
        HoldsADict()(kiln.randn(1, 3))
    assert "HoldsADict.__init__: self.name = nn.Dense(...)" in str(e.value)
    assert "register_cell" not in str(e.value)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.safetensors")
        kiln.save_checkpoint(nn.Dense(3, 2), path)
        with pytest.raises(kiln.Error) as e:
            kiln.load_checkpoint(path, nn.Dense(4, 2))
        assert "load_checkpoint(file, net, strict=False)" in str(e.value)
        assert "LoadOptions" not in str(e.value)


def test_a_dry_run_shows_the_name_mapping_and_loads_nothing():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.safetensors")
        source = nn.SequentialCell(nn.Dense(3, 2))
        kiln.save_checkpoint({"module.0.weight": source[0].weight, "module.0.bias": source[0].bias}, path)
        target = nn.SequentialCell(nn.Dense(3, 2))
        before = target[0].weight.numpy().copy()
        match = kiln.load_torch_weights(target, path, dry_run=True, verbose=False)
        assert match.complete()
        assert np.array_equal(target[0].weight.numpy(), before)
        kiln.load_torch_weights(target, path, verbose=False)
        assert np.array_equal(target[0].weight.numpy(), source[0].weight.numpy())


def test_layout_mistakes_are_named_with_the_transform_that_fixes_them():
    from kiln.dataset import vision
    images = np.random.default_rng(0).integers(0, 255, (4, 8, 8, 3), dtype=np.uint8)
    data = NumpySlicesDataset((images, np.zeros(4, np.int64)), ["image", "label"], shuffle=False)
    wrong_order = data.map([vision.Rescale(1 / 255, 0), vision.HWC2CHW(),
                            vision.Normalize(mean=(0.5, 0.5, 0.5), std=(0.2, 0.2, 0.2))], "image")
    with pytest.raises(Exception, match=r"is channels-first \(\[C, H, W\]\).*put it before HWC2CHW\(\)"):
        next(wrong_order.create_tuple_iterator())
    with pytest.raises(kiln.Error, match=r"channels-last \[N, H, W, C\].*vision.HWC2CHW\(\)"):
        nn.Conv2d(3, 8, 3)(kiln.randn(2, 8, 8, 3))


def test_an_unreadable_image_is_named_with_the_way_to_skip_it():
    from kiln.dataset import ImageFolderDataset
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "cats"))
        with open(os.path.join(d, "cats", "broken.png"), "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n not really")
        with pytest.raises(Exception, match=r"broken\.png.*skip_unreadable=True"):
            next(ImageFolderDataset(d, shuffle=False).create_tuple_iterator())
