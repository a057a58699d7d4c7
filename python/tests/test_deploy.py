"""Checkpoints, PyTorch weights, ONNX export, the inference runtime and serving, from Python."""
import numpy as np
import pytest

import kiln
from kiln import nn


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, has_bias=True)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Dense(4 * 8 * 8, 10)

    def construct(self, x):
        x = kiln.relu(self.bn(self.conv(x)))
        return self.fc(x.flatten(1))


def trained_net():
    net = Net()
    x = kiln.randn((4, 1, 8, 8))
    net(x)  # batch norm statistics move off their initial values
    return net.set_train(False)


def test_checkpoint_round_trip_and_strict_report(tmp_path):
    net = trained_net()
    path = tmp_path / "net.safetensors"
    kiln.save_checkpoint(net, path)
    other = Net()
    report = kiln.load_checkpoint(path, net=other)
    assert report.clean() and len(report.loaded) == len(net.parameters_and_names()) + len(net.buffers_and_names())
    x = kiln.randn((2, 1, 8, 8))
    np.testing.assert_allclose(other.set_train(False)(x).numpy(), net(x).numpy(), rtol=1e-6)
    tensors = kiln.load_checkpoint(path)
    assert "fc.weight" in tensors
    tensors.pop("fc.bias")
    kiln.save_checkpoint(tensors, tmp_path / "partial.safetensors")
    with pytest.raises(kiln.Error, match="fc.bias"):
        kiln.load_checkpoint(tmp_path / "partial.safetensors", net=Net())
    report = kiln.load_checkpoint(tmp_path / "partial.safetensors", net=Net(), strict=False, print_report=False)
    assert [m.split()[0] for m in report.missing] == ["fc.bias"]
    not_loaded, unused = kiln.load_param_into_net(Net(), {"fc.weight": tensors["fc.weight"], "extra": kiln.ones(1)})
    assert "fc.bias" in not_loaded and unused == ["extra"]


def test_mindspore_checkpoint_round_trip_and_names(tmp_path):
    net = trained_net()
    path = tmp_path / "net.ckpt"
    kiln.save_checkpoint(net, path, metadata={"epoch": 3})  # a .ckpt name: MindSpore's format
    assert path.read_bytes()[:1] == b"\x0a"  # Checkpoint.value, as MindSpore writes it
    other = Net()
    report = kiln.load_checkpoint(path, net=other)
    assert report.clean(), str(report)
    x = kiln.randn((2, 1, 8, 8))
    np.testing.assert_array_equal(other.set_train(False)(x).numpy(), net(x).numpy())
    # A MindSpore user's dict: MindSpore's names and optimizer state.
    tensors = kiln.load_checkpoint(path)
    ms = {k.replace("bn.weight", "bn.gamma").replace("bn.bias", "bn.beta").replace("running_mean", "moving_mean")
           .replace("running_var", "moving_variance"): v for k, v in tensors.items()}
    ms["moments.fc.weight"] = kiln.zeros(tuple(tensors["fc.weight"].shape))
    ms["global_step"] = kiln.ones(1)
    fresh = Net()
    not_loaded, unused = kiln.load_param_into_net(fresh, ms, strict_load=True)
    assert not_loaded == [] and sorted(unused) == ["global_step", "moments.fc.weight"]
    np.testing.assert_array_equal(fresh.set_train(False)(x).numpy(), net(x).numpy())
    kiln.save_checkpoint(ms, tmp_path / "ms.ckpt")
    assert kiln.load_checkpoint(tmp_path / "ms.ckpt", net=Net()).clean()
    del ms["bn.gamma"]
    with pytest.raises(kiln.Error, match="bn.weight"):
        kiln.load_param_into_net(Net(), ms, strict_load=True)


def test_mindir_export_is_refused_with_what_kiln_writes(tmp_path):
    with pytest.raises(ValueError, match="does not write MINDIR.*'ONNX'"):
        kiln.export(trained_net(), kiln.zeros((1, 1, 8, 8)), file_name=str(tmp_path / "net"), file_format="MINDIR")


def test_malformed_checkpoint_is_refused(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(kiln.Error):
        kiln.load_checkpoint(bad, net=Net())


def test_export_then_inference_session_matches_eager(tmp_path):
    net = trained_net()
    x = kiln.randn((3, 1, 8, 8))
    expected = net(x).numpy()
    report = kiln.export(net, kiln.zeros((1, 1, 8, 8)), file_name=str(tmp_path / "net"), dynamic_batch=True)
    assert report.nodes > 0
    session = kiln.InferenceSession(str(tmp_path / "net.onnx"))
    assert session.inputs[0].shape[1:] == [1, 8, 8]
    got = session.run([x])[0].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    name = session.inputs[0].name
    out = session.run(None, {name: x.numpy()})  # ONNX Runtime's calling shape
    np.testing.assert_allclose(out[0], expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(kiln.Error, match="input"):
        session.run([kiln.zeros((1, 3, 8, 8))])
    # Half precision on request: float32 outputs close to the float32 run's.
    half = kiln.InferenceSession(str(tmp_path / "net.onnx"), precision="bf16").run([x])[0].numpy()
    assert half.dtype == np.float32
    np.testing.assert_allclose(half, expected, rtol=0.05, atol=0.05 * np.abs(expected).max())
    with pytest.raises(kiln.Error, match=r"InferenceSession\(precision=\.\.\.\) is 'int4'"):
        kiln.InferenceSession(str(tmp_path / "net.onnx"), precision="int4")


def test_serve_and_query(tmp_path):
    net = trained_net()
    kiln.export(net, kiln.zeros((1, 1, 8, 8)), file_name=str(tmp_path / "tiny"), dynamic_batch=True)
    x = np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)
    with kiln.serve(tmp_path / "tiny.onnx") as served:
        (logits,) = served.infer(x)
    np.testing.assert_allclose(logits, net(kiln.tensor(x)).numpy(), rtol=1e-4, atol=1e-5)


@pytest.fixture
def torch():
    """PyTorch, for the tests that compare with it; they alone skip without python3-torch."""
    return pytest.importorskip("torch", reason="python3-torch is not installed")


def test_torch_state_dict_loads_with_a_name_report(tmp_path, torch):
    tnet = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    torch.save(tnet.state_dict(), tmp_path / "w.pt")
    net = nn.SequentialCell(nn.Dense(6, 5), nn.ReLU(), nn.Dense(5, 3))
    match = kiln.load_torch_weights(net, tmp_path / "w.pt", verbose=False)
    assert match.complete() and len(match.matched) == 4
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    np.testing.assert_allclose(net(kiln.tensor(x)).numpy(), tnet(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(kiln.Error, match="nothing was loaded"):
        kiln.load_torch_weights(nn.SequentialCell(nn.Dense(6, 5)), tmp_path / "w.pt", verbose=False)


def test_tensors_on_a_device_the_host_cannot_read_report_it_and_copy_for_numpy():
    t = kiln.arange(6, dtype=kiln.float32).reshape(2, 3).to("reference")
    assert t.device == "reference:0"
    assert t.__dlpack_device__() == (12, 0)  # kDLExtDev: no DLPack consumer reads the reference backend's memory
    with pytest.raises(BufferError, match=r"reference:0.*\.to\('cpu'\)"):
        t.__dlpack__()
    np.testing.assert_array_equal(t.asnumpy(), np.arange(6, dtype=np.float32).reshape(2, 3))  # a copy, as MindSpore's
    assert (t * 2).sum().item() == 30.0
    assert "[3.0000, 4.0000, 5.0000]" in repr(t)


def test_creation_takes_a_device_and_makes_the_tensor_there():
    kiln.manual_seed(4)
    on_cpu = [kiln.rand(2, 3), kiln.randint(0, 7, (5,))]
    kiln.manual_seed(4)
    there = [kiln.rand(2, 3, device="reference"), kiln.randint(0, 7, (5,), device="reference")]
    for a, b in zip(on_cpu, there):
        assert b.device == "reference:0"
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())  # one seed, the same numbers on every device
    np.testing.assert_array_equal(kiln.eye(3, 2, device="reference").asnumpy(), np.eye(3, 2, dtype=np.float32))
    np.testing.assert_allclose(kiln.linspace(0, 1, 5, device="reference").asnumpy(), np.linspace(0, 1, 5))
    assert kiln.zeros(2, 3, dtype=kiln.int64, device="reference").device == "reference:0"
    assert kiln.full((2,), 1.5, device="reference").asnumpy().tolist() == [1.5, 1.5]
    assert kiln.arange(4, device="reference").device == "reference:0"
    with pytest.raises(kiln.Error, match=r"unknown device 'tpu'.*cpu, cuda\[:N\], reference\[:N\]"):
        kiln.zeros(2, device="tpu")


def test_dlpack_round_trips_with_torch_without_copies(torch):
    t = kiln.arange(6).reshape(2, 3)
    as_torch = torch.from_dlpack(t)
    assert as_torch.shape == (2, 3) and as_torch.data_ptr() == t.data_ptr()
    as_torch[0, 0] = 9.0
    assert t[0, 0].item() == 9.0
    source = torch.arange(12, dtype=torch.float64).reshape(3, 4)[:, 1:3]
    back = kiln.from_dlpack(source)
    assert back.dtype == kiln.float64 and back.shape == (3, 2)
    np.testing.assert_array_equal(back.numpy(), source.numpy())
    assert back.data_ptr() == source.data_ptr()
    for dtype in (torch.int64, torch.int32, torch.uint8, torch.float16, torch.bfloat16):
        x = torch.ones(3, dtype=dtype)
        assert kiln.from_dlpack(x).shape == (3,)


def test_dlpack_shares_cuda_tensors_with_torch_without_copies(torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch on this machine")
    try:
        t = kiln.arange(6, dtype=kiln.float32, device="cuda").reshape(2, 3)
    except kiln.Error as e:
        pytest.skip(f"no CUDA backend for kiln here: {e}")
    assert t.__dlpack_device__() == (2, 0)  # kDLCUDA
    as_torch = torch.from_dlpack(t)
    assert as_torch.is_cuda and as_torch.data_ptr() == t.data_ptr()
    as_torch[0, 0] = 9.0
    torch.cuda.synchronize()
    assert t[0, 0].item() == 9.0
    source = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)[:, 1:3] * 2
    back = kiln.from_dlpack(source)
    assert back.device == "cuda:0" and back.data_ptr() == source.data_ptr()
    np.testing.assert_array_equal(back.asnumpy(), source.cpu().numpy())
    np.testing.assert_array_equal((back + 1).asnumpy(), (source + 1).cpu().numpy())


def test_quantize_with_a_python_iterable_and_run_the_int8_model(tmp_path):
    net = trained_net()
    kiln.export(net, kiln.zeros((1, 1, 8, 8)), file_name=str(tmp_path / "net"), dynamic_batch=True)
    batches = (np.random.default_rng(i).standard_normal((16, 1, 8, 8)).astype(np.float32) for i in range(8))
    report = kiln.quantize(tmp_path / "net.onnx", batches, method="percentile")
    assert report.quantized == 2 and report.calibration_batches == 6 and report.held_out_batches == 2
    assert "2 of 2 layers quantized" in str(report)
    x = kiln.randn((8, 1, 8, 8))
    got = kiln.InferenceSession(str(tmp_path / "net.int8.onnx")).run([x])[0].numpy()
    expected = net(x).numpy()
    assert np.linalg.norm(got - expected) < 0.05 * np.linalg.norm(expected)
    with pytest.raises(ValueError, match="method 'kl'"):
        kiln.quantize(tmp_path / "net.onnx", [x], method="kl")
    with pytest.raises(ValueError, match="has 2 tensors but the model has 1 inputs"):
        kiln.quantize(tmp_path / "net.onnx", [[x, x]])
    with pytest.raises(ValueError, match="calibration gave no batches"):
        kiln.quantize(tmp_path / "net.onnx", [])
    with pytest.raises(ValueError, match=r"calibration batch 1 gives input 'input' a float64 \[16, 1, 8, 8\] tensor, "
                                         r"but the model takes input: float32 \[batch, 1, 8, 8\]"):
        kiln.quantize(tmp_path / "net.onnx", [np.zeros((16, 1, 8, 8), np.float32), np.zeros((16, 1, 8, 8))])
    with pytest.raises(ValueError, match="held_out=1.5: the share of calibration batches kept back"):
        kiln.quantize(tmp_path / "net.onnx", [x], held_out=1.5)


def test_quantization_aware_layers_train_and_turn_back_into_the_float_net():
    net = trained_net()
    x = kiln.randn((4, 1, 8, 8))
    assert kiln.nn.quantize_aware(net) == 2
    net.set_train(True)
    net(x)  # the layers see their inputs' range
    net.set_train(False)
    quantized = net(x).numpy()
    kiln.nn.set_fake_quantization(net, False)
    expected = net(x).numpy()
    assert 0 < np.abs(quantized - expected).max() < 0.2 * np.abs(expected).max()
    kiln.nn.set_fake_quantization(net, True)
    np.testing.assert_array_equal(net(x).numpy(), quantized)
    with pytest.raises(ValueError, match="activations 'int4'"):
        kiln.nn.quantize_aware(net, activations="int4")
