"""Mixed precision from Python: MindSpore's amp levels and loss scale managers, autocast, all_finite."""
import numpy as np
import pytest

import kiln
from kiln import amp, nn
from kiln.dataset import NumpySlicesDataset
from kiln.train import Model, Callback


def blobs(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(np.int32)
    x = (rng.standard_normal((n, 8)) + (4.0 * y - 2.0)[:, None]).astype(np.float32)
    return NumpySlicesDataset((x, y), ["x", "y"], shuffle=False).batch(32)


def classifier():
    return nn.SequentialCell(nn.Dense(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dense(16, 2))


class Steps(Callback):
    def __init__(self):
        self.scales, self.skipped = [], []

    def on_step_end(self, model, info):
        self.scales.append(info.loss_scale)
        self.skipped.append(info.update_skipped)


def test_autocast_runs_matrix_products_low_and_reductions_in_float32():
    x, w = kiln.randn(4, 8), kiln.randn(3, 8)
    with amp.autocast(kiln.bfloat16):
        y = kiln.ops.linear(x, w)
        assert y.dtype == kiln.bfloat16
        assert kiln.ops.softmax(y, axis=1).dtype == kiln.float32
    assert kiln.ops.linear(x, w).dtype == kiln.float32, "the scope ends with the block"
    with pytest.raises(ValueError, match="kiln.float16 or kiln.bfloat16"):
        amp.autocast(kiln.float64)


def test_all_finite_finds_inf_and_nan():
    ok = kiln.tensor(np.ones((3, 3), np.float32))
    assert bool(amp.all_finite([ok, ok]).asnumpy())
    for bad in (np.inf, -np.inf, np.nan):
        values = np.ones(5, np.float32)
        values[3] = bad
        assert not bool(amp.all_finite([ok, kiln.tensor(values)]).asnumpy())


def test_auto_mixed_precision_levels():
    net = amp.auto_mixed_precision(classifier(), "auto", kiln.bfloat16)
    assert net.autocast == kiln.bfloat16
    assert net(kiln.randn(4, 8)).dtype == kiln.bfloat16, "the last Dense computes in bfloat16"
    o2 = amp.auto_mixed_precision(classifier(), "O2")
    assert o2.compute_dtype == kiln.float16
    assert [c.compute_dtype for _, c in o2.cells_and_names() if c.type_name() == "BatchNorm1d"] == [kiln.float32]
    for p in o2.trainable_params():
        assert p.dtype == kiln.float32, "the parameters stay float32"
    with pytest.raises(ValueError, match="amp_level must be one of O0, O1, O2, O3, auto"):
        amp.auto_mixed_precision(classifier(), "O4")
    with pytest.raises(ValueError, match="kiln.float16 or kiln.bfloat16"):
        amp.auto_mixed_precision(classifier(), "O1", kiln.int8)


@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE])
@pytest.mark.parametrize("amp_level", ["O1", "O2", "O3"])
def test_model_trains_at_each_amp_level(mode, amp_level):
    kiln.set_context(mode=mode)
    net = classifier()
    model = Model(net, nn.CrossEntropyLoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9), metrics={"accuracy"},
                  amp_level=amp_level)
    steps = Steps()
    model.train(3, blobs(256, 1), callbacks=[steps])
    assert model.eval(blobs(128, 2))["accuracy"] > 0.95
    assert steps.scales[0] == 65536, "float16 trains with a dynamic loss scale from 2^16"
    for p in net.trainable_params():
        assert p.dtype == kiln.float32


def test_a_dynamic_loss_scale_skips_overflowed_steps_and_backs_off():
    net = classifier()
    manager = amp.DynamicLossScaleManager(init_loss_scale=2.0 ** 40, scale_factor=2, scale_window=1000)
    model = Model(net, nn.CrossEntropyLoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9), metrics={"accuracy"},
                  amp_level="O1", loss_scale_manager=manager)
    steps = Steps()
    history = model.train(6, blobs(256, 1), callbacks=[steps])
    assert steps.skipped[0], "2^40 overflows float16's gradients"
    assert 15 < sum(steps.skipped) < 40
    assert not steps.skipped[-1]
    assert steps.scales[-1] < 2.0 ** 20 and steps.scales[-1] == model._model.loss_scale
    assert sum(h["skipped_steps"] for h in history) == sum(steps.skipped)
    assert model.eval(blobs(128, 2))["accuracy"] > 0.95


def test_a_bfloat16_network_trains_with_its_loss_under_autocast():
    net = amp.auto_mixed_precision(classifier(), "auto", kiln.bfloat16)
    model = Model(net, nn.CrossEntropyLoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9), metrics={"accuracy"})
    steps = Steps()
    model.train(3, blobs(256, 1), callbacks=[steps])
    assert steps.scales[0] == 0, "bfloat16 needs no loss scale"
    assert model.eval(blobs(128, 2))["accuracy"] > 0.95


def test_bad_managers_are_refused():
    net = classifier()
    with pytest.raises(ValueError, match="always skips the update"):
        amp.FixedLossScaleManager(128, drop_overflow_update=False)
    with pytest.raises(TypeError, match="loss_scale_manager must be"):
        Model(net, nn.CrossEntropyLoss(), nn.SGD(net.trainable_params(), 0.1), loss_scale_manager=1024)
    with pytest.raises(ValueError, match="amp_level must be one of"):
        Model(net, nn.CrossEntropyLoss(), nn.SGD(net.trainable_params(), 0.1), amp_level="O5")
    fixed = amp.FixedLossScaleManager(256)
    assert fixed.get_loss_scale() == 256 and fixed.get_drop_overflow_update()
