"""Training from Python: the MindSpore quickstart with only its imports changed, a hand-written loop,
graph mode, callbacks and Ctrl-C."""
import os
import signal
import threading

import numpy as np
import pytest

# MindSpore's quickstart imports were: import mindspore; from mindspore import nn; from mindspore.dataset
# import vision, transforms; from mindspore.dataset import MnistDataset; from mindspore.train import Model
import kiln as mindspore
from kiln import nn
from kiln.dataset import vision, transforms
from kiln.dataset import FashionMnistDataset
from kiln.train import Model, LossMonitor

import kiln


def datapipe(dataset, batch_size):
    image_transforms = [
        vision.Rescale(1.0 / 255.0, 0),
        vision.Normalize(mean=(0.1307,), std=(0.3081,)),
        vision.HWC2CHW()
    ]
    label_transform = transforms.TypeCast(mindspore.int32)
    dataset = dataset.map(image_transforms, 'image')
    dataset = dataset.map(label_transform, 'label')
    dataset = dataset.batch(batch_size)
    return dataset


class SimpleNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(784, 256)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(256, 10)

    def construct(self, x):
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        return self.fc2(x)


def test_mindspore_first_example_trains_on_fashion_mnist(fashion_mnist):
    train_dataset = datapipe(FashionMnistDataset(fashion_mnist, usage='train'), 64)
    test_dataset = datapipe(FashionMnistDataset(fashion_mnist, usage='test'), 64)
    net = SimpleNet()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = Model(net, loss_fn=loss_fn, optimizer=optimizer, metrics={'accuracy'})
    model.train(1, train_dataset, callbacks=[LossMonitor(300)])
    acc = model.eval(test_dataset)
    print("quickstart, 1 epoch:", acc)
    assert acc["accuracy"] > 0.80
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"kiln-quickstart-{os.getpid()}.onnx")
    mindspore.export(net, mindspore.Tensor(shape=(1, 784), dtype=mindspore.float32), file_name=path[:-5],
                     file_format="ONNX")
    assert os.path.getsize(path) > 784 * 256 * 4
    os.remove(path)


def test_w1_from_python_matches_the_cpp_recipe(fashion_mnist):
    """W1 (MLP 784-512-256-10, SGD momentum 0.9, batch 64, cosine decay) one epoch: >= 84% as in C++."""
    kiln.manual_seed(0)
    train = kiln.dataset.FashionMnistDataset(fashion_mnist, "train").map(
        [vision.Rescale(1 / 255), vision.HWC2CHW()], "image").batch(64)
    test = kiln.dataset.FashionMnistDataset(fashion_mnist, "test").map(
        [vision.Rescale(1 / 255), vision.HWC2CHW()], "image").batch(1000)
    net = nn.SequentialCell(nn.Flatten(), nn.Dense(784, 512), nn.ReLU(), nn.Dense(512, 256), nn.ReLU(),
                            nn.Dense(256, 10))
    steps = train.get_dataset_size()
    opt = nn.SGD(net.trainable_params(), learning_rate=nn.schedules.cosine(0.05, steps), momentum=0.9)
    model = Model(net, loss_fn=nn.CrossEntropyLoss(), optimizer=opt)
    history = model.train(1, train)
    result = model.eval(test)
    print(f"W1 from Python, 1 epoch: {result['accuracy']:.4f}, {history[0]['samples_per_s']:.0f} samples/s")
    assert result["accuracy"] >= 0.84


def small_data(n=256):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    return x, y


def test_hand_written_loop_learns():
    x, y = small_data()
    net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2))
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    loss_fn = nn.CrossEntropyLoss()
    first = None
    for step in range(100):
        loss = loss_fn(net(kiln.tensor(x)), kiln.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < first / 4


def test_python_callbacks_generator_dataset_and_graph_mode():
    x, y = small_data()

    class Source:
        def __len__(self):
            return len(x)

        def __getitem__(self, i):
            return x[i], y[i]

    class Recorder(kiln.train.Callback):
        def __init__(self):
            self.steps, self.epochs = [], []

        def on_step_end(self, model, info):
            self.steps.append(info.loss)

        def on_epoch_end(self, model, info):
            self.epochs.append(info.loss)

    class MindSporeStyle:
        def __init__(self):
            self.seen = 0

        def step_end(self, run_context):
            self.seen = run_context.original_args().cur_step_num

    data = kiln.dataset.GeneratorDataset(Source(), ["data", "label"]).map(lambda a: a * 2.0, "data").batch(32)
    kiln.set_context(mode=kiln.GRAPH_MODE)
    net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2))
    model = Model(net, loss_fn=nn.CrossEntropyLoss(), optimizer=nn.SGD(net.trainable_params(), 0.1, 0.9),
                  metrics={"accuracy"})
    recorder, ms = Recorder(), MindSporeStyle()
    model.train(3, data, callbacks=[recorder, ms])
    assert len(recorder.steps) == 24 and len(recorder.epochs) == 3 and ms.seen == 24
    assert recorder.epochs[-1] < recorder.epochs[0]
    assert model.compiled_graphs[0] >= 1  # the training step ran as a compiled graph
    assert model.eval(kiln.dataset.NumpySlicesDataset((x * 2, y), shuffle=False).batch(64))["accuracy"] > 0.8


def test_ctrl_c_stops_training_after_the_current_step():
    x, y = small_data(4096)
    data = kiln.dataset.NumpySlicesDataset((x, y)).batch(8)

    class Slow(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(8, 2)

        def construct(self, t):
            return self.fc(t)

    net = Slow()
    model = Model(net, loss_fn=nn.CrossEntropyLoss(), optimizer=nn.SGD(net.trainable_params(), 0.01))
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        model.train(1000, data)
    timer.cancel()
    assert 0 < model.global_step < 1000 * 512


def test_errors_name_the_python_line():
    class Bad(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 2)

        def construct(self, x):
            return self.fc(x)  # wrong width on purpose

    with pytest.raises(kiln.Error) as info:
        Bad()(kiln.ones((1, 3)))
    message = str(info.value)
    assert "Dense" in message and "test_training.py" in message


def test_reading_a_value_while_tracing_names_the_cell_and_the_line():
    class Branchy(nn.Cell):
        def construct(self, x):
            if x.sum().item() > 0:  # data-dependent control flow
                return x
            return -x

    compiled = kiln.jit(Branchy())
    with pytest.raises(kiln.Error) as info:
        compiled(kiln.ones((2, 2)))
    message = str(info.value)
    assert "Branchy" in message and "test_training.py" in message
    assert "kiln.where(condition, a, b)" in message and "kiln::" not in message  # the fix in Python


def test_a_loop_over_a_length_read_while_tracing_says_how_to_keep_one_graph():
    class Looping(nn.Cell):
        def construct(self, x, lengths):
            out = x
            for _ in range(int(lengths.max().item())):  # a loop over a length held in a tensor
                out = out * 2
            return out

    with pytest.raises(kiln.Error) as info:
        kiln.jit(Looping())(kiln.ones((2, 3)), kiln.tensor(np.array([2, 3], dtype=np.int64)))
    message = str(info.value)
    assert "pad or bucket the lengths" in message and "nn.LSTM" in message


@pytest.mark.parametrize("mode", ["PYNATIVE_MODE", "GRAPH_MODE"])
def test_to_float_trains_a_half_precision_network_on_float32_weights(mode):
    x, y = small_data()
    kiln.set_context(mode=getattr(kiln, mode))
    net = nn.SequentialCell(nn.Dense(8, 16, activation="relu"), nn.Dense(16, 2))
    assert net.to_float(kiln.float16) is net and net.compute_dtype == kiln.float16
    assert net(kiln.tensor(x[:4])).dtype == kiln.float16
    loss_fn = nn.CrossEntropyLoss().to_float(kiln.float32)  # MindSpore's usual pairing
    model = Model(net, loss_fn=loss_fn, optimizer=nn.SGD(net.trainable_params(), 0.1, 0.9), metrics={"accuracy"})
    model.train(3, kiln.dataset.NumpySlicesDataset((x, y)).batch(32))
    assert all(p.dtype == kiln.float32 for p in net.trainable_params())
    assert model.eval(kiln.dataset.NumpySlicesDataset((x, y), shuffle=False).batch(64))["accuracy"] > 0.9


def test_to_float_reaches_python_cells_with_several_inputs():
    class Mix(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 4)

        def construct(self, a, b):
            return self.fc(a) + b

    mix = Mix().to_float(kiln.bfloat16)
    out = mix(kiln.ones((2, 4)), kiln.ones((2, 4)))
    assert out.dtype == kiln.bfloat16
    with pytest.raises(kiln.Error, match="floating point"):
        Mix().to_float(kiln.int32)


def test_datasets_carry_further_columns_with_their_samples():
    x, y = small_data(64)
    w = (np.arange(64, dtype=np.float32) + 100)
    data = kiln.dataset.NumpySlicesDataset((x, y, w), ["image", "label", "weight"], shuffle=True)
    halved = data.map(lambda v: v / 2, "weight").batch(16)
    assert halved.get_col_names() == ["image", "label", "weight"]
    seen = 0
    for image, label, weight in halved.create_tuple_iterator(output_numpy=True):
        rows = [int(np.flatnonzero((x == r).all(1))[0]) for r in image]  # where each shuffled row came from
        np.testing.assert_array_equal(label, y[rows])
        np.testing.assert_allclose(weight, w[rows] / 2)
        seen += len(label)
    assert seen == 64
    row = next(iter(kiln.dataset.NumpySlicesDataset({"a": x, "b": y, "c": w}, shuffle=False)))
    assert len(row) == 3 and float(row[2].numpy()) == 100.0

    class Source:  # random access, read by the pipeline's workers
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return np.full(2, i, np.float32), np.int64(i % 2), np.float32(i * 10)
    source = kiln.dataset.GeneratorDataset(Source(), shuffle=False)
    assert source.get_col_names() == ["data", "label", "column_2"]
    batches = list(source.batch(4).create_dict_iterator(output_numpy=True))
    np.testing.assert_allclose(batches[1]["column_2"], [40, 50, 60, 70])
    generated = kiln.dataset.GeneratorDataset(lambda: ((x[i], y[i], w[i]) for i in range(5)), ["x", "y", "w"],
                                              shuffle=False)
    assert [float(t[2].numpy()) for t in generated] == [100, 101, 102, 103, 104]
    with pytest.raises(ValueError, match="2 column names"):
        kiln.dataset.GeneratorDataset(Source(), ["data", "label"])
    with pytest.raises(ValueError, match="rows"):
        kiln.dataset.NumpySlicesDataset((x, y, w[:10]))
    with pytest.raises(ValueError, match="no column 'wieght'"):
        data.map(lambda v: v, "wieght")


def test_a_weighted_loss_trains_from_a_three_column_dataset():
    x, y = small_data()
    w = np.where(y == 1, 2.0, 0.5).astype(np.float32)
    data = kiln.dataset.NumpySlicesDataset((x, y, w), ["x", "y", "w"]).batch(32)
    net = nn.SequentialCell(nn.Dense(8, 16, activation="relu"), nn.Dense(16, 2))
    with pytest.raises(ValueError, match=r"\(input, label\) datasets.*\['x', 'y', 'w'\].*create_tuple_iterator"):
        Model(net, loss_fn=nn.CrossEntropyLoss(), optimizer=nn.SGD(net.trainable_params(), 0.1)).train(1, data)
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    opt = nn.SGD(net.trainable_params(), 0.1, 0.9)
    losses = []
    for _ in range(3):
        for xb, yb, wb in data.create_tuple_iterator():
            loss = (loss_fn(net(xb), yb) * wb).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert losses[-1] < losses[0] / 2


@pytest.mark.parametrize("mode", ["PYNATIVE_MODE", "GRAPH_MODE"])
def test_model_trains_a_network_that_computes_its_own_loss_from_every_column(mode):
    x, y = small_data()
    w = np.where(y == 1, 2.0, 0.5).astype(np.float32)
    kiln.set_context(mode=getattr(kiln, mode))

    class WeightedLoss(nn.Cell):  # MindSpore's net_with_loss, with a third column
        def __init__(self, net):
            super().__init__()
            self.net = net
            self.loss = nn.CrossEntropyLoss(reduction="none")

        def construct(self, data, label, weight):
            return (self.loss(self.net(data), label) * weight).mean()

    net = nn.SequentialCell(nn.Dense(8, 16, activation="relu"), nn.Dense(16, 2))
    model = Model(WeightedLoss(net), optimizer=nn.SGD(net.trainable_params(), 0.1, 0.9))
    data = kiln.dataset.NumpySlicesDataset((x, y, w), ["x", "y", "w"])
    history = model.train(3, data.batch(32), valid_dataset=data.batch(64))
    assert history[-1]["loss"] < history[0]["loss"]
    assert model.eval(data.batch(64))["loss"] < 0.3
    assert Model(net, loss_fn=nn.CrossEntropyLoss(), optimizer=model.optimizer, metrics={"accuracy"}).eval(
        kiln.dataset.NumpySlicesDataset((x, y)).batch(64))["accuracy"] > 0.9
    with pytest.raises(kiln.Error, match="computes its loss from whole batches"):
        model.predict(kiln.tensor(x[:2]))
    with pytest.raises(ValueError, match="metrics need the network's outputs"):
        Model(WeightedLoss(net), optimizer=model.optimizer, metrics={"accuracy"})


def test_set_context_device_target_trains_there_with_the_cpus_losses():
    """MindSpore's device_target: Model moves its network there and copies each batch; the reference
    backend (a device whose memory the host cannot read) stands in for a GPU here."""
    x = np.random.rand(64, 784).astype(np.float32)
    y = (np.arange(64) % 10).astype(np.int32)

    def run(target):
        kiln.set_context(device_target=target)
        kiln.manual_seed(1)
        net = SimpleNet()
        model = Model(net, nn.CrossEntropyLoss(), nn.SGD(net.trainable_params(), learning_rate=0.1, momentum=0.9),
                      metrics={'accuracy'})
        data = kiln.dataset.NumpySlicesDataset({"image": x, "label": y}, shuffle=False).batch(16)
        losses = [h["loss"] for h in model.train(3, data)]
        assert net.fc1.weight.device == kiln.context.device()
        return losses, model.eval(data)["accuracy"], model.predict(kiln.Tensor(x[:2]))

    cpu_losses, cpu_accuracy, cpu_out = run("CPU")
    assert kiln.get_context("device_target") == "CPU"
    ref_losses, ref_accuracy, ref_out = run("reference")
    assert kiln.get_context("device_target") == "reference"
    assert ref_out.device == "reference:0"
    np.testing.assert_allclose(ref_losses, cpu_losses, rtol=1e-4)
    assert cpu_losses[-1] < cpu_losses[0]
    assert ref_accuracy == cpu_accuracy
    np.testing.assert_allclose(ref_out.asnumpy(), cpu_out.asnumpy(), rtol=1e-4, atol=1e-5)


def test_set_context_names_a_device_target_this_build_lacks():
    with pytest.raises(ValueError, match="'Ascend' is not a Kiln backend; use 'CPU' or 'GPU'"):
        kiln.set_context(device_target="Ascend")
    try:
        kiln.set_context(device_target="GPU")
    except kiln.Error as e:  # without the CUDA backend: it says so, and how to get it
        assert "no cuda backend in this build of Kiln" in str(e) and "-DKILN_CUDA=on" in str(e)
        assert kiln.get_context("device_target") == "CPU"
    else:
        assert kiln.get_context("device_target") == "GPU"
    with pytest.raises(ValueError, match="device_id must be a non-negative int"):
        kiln.set_context(device_id=-1)
