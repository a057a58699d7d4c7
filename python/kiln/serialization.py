"""Checkpoints, PyTorch weight import, ONNX export, the inference runtime, serving."""
import json
import os
import urllib.request

from . import _kiln


def save_checkpoint(save_obj, ckpt_file_name, metadata=None):
    """Saves a Cell's parameters and buffers (or a dict / list of (name, tensor)).

    A name ending in ``.ckpt`` gets MindSpore's checkpoint format (``metadata``
    saved as strings beside the tensors, as MindSpore's ``append_dict``);
    any other name gets safetensors, Kiln's own. The file is written
    atomically: a failure (full disk) leaves any old file intact.
    """
    metadata = {str(k): str(v) for k, v in (metadata or {}).items()}
    path = os.fspath(ckpt_file_name)
    if path.endswith(".ckpt"):
        _kiln.save_mindspore_checkpoint(save_obj, path, metadata)
    elif isinstance(save_obj, _kiln.Cell):
        _kiln.save_cell(save_obj, path, metadata)
    else:
        _kiln.save_tensors(save_obj, path, metadata)


def load_checkpoint(ckpt_file_name, net=None, strict=True, print_report=True):
    """Reads a safetensors or MindSpore ``.ckpt`` checkpoint (or a torch.save file without a net).

    Without ``net``: a dict of name -> Tensor. With ``net``: loads into it and
    returns the LoadReport. Strict (the default): every parameter and buffer
    must be in the file with its shape and dtype and nothing else may be
    there; otherwise nothing is changed and the error lists every problem.
    Non-strict: loads what matches and reports (and prints) the rest. A
    ``.ckpt`` file's MindSpore names are taken the Kiln way (``bn.gamma`` is
    ``bn.weight``, ``moving_mean`` is ``running_mean``) and its optimizer state
    (``moments.*``, ``global_step``, ...) is passed over.
    """
    path = os.fspath(ckpt_file_name)
    if net is None:
        return dict(_kiln.load_tensors(path))
    return _kiln.load_into(net, path, strict, print_report)


def load_param_into_net(net, parameter_dict, strict_load=False):
    """Copies a dict of name -> Tensor into the net's parameters, as MindSpore's function.

    MindSpore's names are taken the Kiln way (``bn.gamma`` is ``bn.weight``,
    ``embedding_table`` is ``weight``, an LSTM's ``w_ih_list.0`` its
    ``weight_ih_l0``), and a 1-D convolution's weight saved in MindSpore's
    2-D form is reshaped. Returns ``(param_not_load, ckpt_not_load)``: the
    net's names that got no value and the dict's names that were not loaded
    (optimizer state among them). ``strict_load`` makes a missing parameter,
    or a weight that matches nothing, an error, before anything is changed.
    """
    names = {n for n, _ in net.parameters_and_names()} | {n for n, _ in net.buffers_and_names()}
    keys = list(parameter_dict)
    mapped = _kiln.kiln_names_for_mindspore(net, keys)
    loads = {}
    for key, kiln_name in zip(keys, mapped):
        target = key if key in names else kiln_name
        if target in names and target not in loads:
            loads[target] = parameter_dict[key]
    used = set(loads)
    param_not_load = sorted(names - used)
    ckpt_not_load = [k for k, t in zip(keys, mapped) if (k if k in names else t) not in used]
    unmatched_weights = [k for k, t in zip(keys, mapped) if t and k in ckpt_not_load]
    if strict_load and (param_not_load or unmatched_weights):
        raise _kiln.Error(f"load_param_into_net: not in the dict: {param_not_load}; "
                          f"not in the net: {unmatched_weights}; nothing was loaded")
    _kiln.assign_by_name(net, loads)
    return param_not_load, ckpt_not_load


def load_torch_weights(net, path, rules=None, strict=True, verbose=True, dry_run=False):
    """Loads a PyTorch state dict (``torch.save`` file) or safetensors file into ``net``.

    Names are matched in stages (rename rules from a YAML file, same names,
    similar spellings, then order and shape) and every decision is shown in
    the table it prints. Strict: any unmatched entry is an error and nothing
    is loaded. ``dry_run=True`` only matches and prints: the net is left as it
    is, whatever matched (``kiln ckpt diff`` from Python). Returns the MatchResult.
    """
    match, table = _kiln.import_weights(net, os.fspath(path), os.fspath(rules) if rules else "", strict, dry_run)
    if verbose:
        print(table)
    return match


def export(net, *inputs, file_name, file_format="ONNX", dynamic_batch=False, input_names=None, output_names=None,
           opset=17):
    """Exports a Cell with its weights, as MindSpore's ``export(net, *inputs, file_name, file_format)``.

    The Cell is traced in inference mode on the sample inputs; ``.onnx`` is
    added to ``file_name`` when missing. Returns the ExportReport.
    """
    fmt = str(file_format).upper()
    if fmt in ("MINDIR", "AIR"):
        raise ValueError(f"file_format {file_format!r}: Kiln does not write {fmt} files; it writes 'ONNX', which "
                         "kiln run, kiln serve and InferenceSession take (as they take .mindir files MindSpore wrote)")
    if fmt != "ONNX":
        raise ValueError(f"file_format {file_format!r} is not supported; Kiln exports 'ONNX'")
    if not inputs:
        raise ValueError("export needs sample inputs: export(net, sample, file_name=...)")
    path = os.fspath(file_name)
    if not path.endswith(".onnx"):
        path += ".onnx"
    samples = [x if isinstance(x, _kiln.Tensor) else _kiln.tensor(x) for x in inputs]
    from .nn.cell import dynamic_axes
    declared = dynamic_axes(net)  # set_inputs' None dimensions: a None batch exports as a dynamic batch
    if declared:
        other = [(i, a) for i, a in declared if a != 0]
        if other:
            raise ValueError(f"set_inputs leaves input {other[0][0]}'s axis {other[0][1]} unknown; Kiln exports a dynamic "
                             "batch (axis 0) only, so give that axis its size in set_inputs before exporting")
        dynamic_batch = True
    return _kiln.export_onnx(net, samples, path, dynamic_batch, list(input_names or []), list(output_names or []),
                             opset)


def _batch_inputs(batch, names):
    """One calibration batch as the model's inputs in order: an array or Tensor
    (one input), a list or tuple (in order), or a dict by input name."""
    def tensor(x):
        return x if isinstance(x, _kiln.Tensor) else _kiln.tensor(x)
    if isinstance(batch, dict):
        missing = [n for n in names if n not in batch]
        if missing:
            raise ValueError(f"a calibration batch has no input {missing[0]!r}; the model's inputs: {', '.join(names)}")
        return [tensor(batch[n]) for n in names]
    if isinstance(batch, (list, tuple)):
        if len(batch) != len(names):
            raise ValueError(f"a calibration batch has {len(batch)} tensors but the model has {len(names)} inputs "
                             f"({', '.join(names)})")
        return [tensor(x) for x in batch]
    if len(names) != 1:
        raise ValueError(f"the model has {len(names)} inputs ({', '.join(names)}): give each calibration batch as a "
                         "list in that order or a dict by name")
    return [tensor(batch)]


def quantize(model, calibration, file_name=None, method="minmax", percentile=99.99, activations="uint8",
             reduce_range=False, keep=(), keep_sensitive=0, held_out=0.25):
    """Quantizes an ONNX model to int8 after training, as ``kiln quantize`` does.

    ``calibration`` is an iterable of batches of typical inputs (NumPy arrays
    or Tensors; a list or dict per batch for several inputs). Writes the QDQ
    model (to ``file_name``, by default the model's name with ``.int8.onnx``),
    which Kiln runs on int8 kernels and ONNX Runtime runs too, and returns the
    report: ``str(report)`` compares the int8 model with the float one.
    """
    path = os.fspath(model)
    if method not in ("minmax", "percentile", "entropy"):
        raise ValueError(f"method {method!r}: use 'minmax', 'percentile' or 'entropy'")
    if activations not in ("uint8", "int8"):
        raise ValueError(f"activations {activations!r}: use 'uint8' or 'int8'")
    with open(path, "rb") as f:
        data = f.read()
    if not 0 <= held_out < 1:
        raise ValueError(f"held_out={held_out!r}: the share of calibration batches kept back for the report, at least "
                         "0 and below 1")
    inputs = _kiln.InferenceSession(path).inputs
    names = [i.name for i in inputs]
    batches = [_batch_inputs(b, names) for b in calibration]
    if not batches:
        raise ValueError("calibration gave no batches: pass a few batches of typical inputs")
    for index, batch in enumerate(batches):
        for info, t in zip(inputs, batch):
            if not info.accepts(t):
                raise ValueError(f"calibration batch {index} gives input {info.name!r} a {t.dtype.name} {list(t.shape)} "
                                 f"tensor, but the model takes {info!r}")
    out = os.fspath(file_name) if file_name is not None else os.path.splitext(path)[0] + ".int8.onnx"
    return _kiln.quantize_model(data, out, batches, method, percentile, activations, reduce_range, list(keep),
                                keep_sensitive, held_out)


class InferenceSession(_kiln.InferenceSession):
    """Runs an ONNX model (Kiln's or torch.onnx.export's) with Kiln's graph passes and kernels.

    ``run(inputs)`` takes a list (or one input) and returns a list of
    Tensors, or a dict by input name and returns a dict. ONNX Runtime's form
    ``run(output_names, input_feed)`` returns NumPy arrays, as it does there.
    """

    def run(self, *args):
        if len(args) == 2:
            output_names, feed = args
            outputs = super().run(dict(feed))
            names = output_names or [o.name for o in self.outputs]
            return [outputs[n].numpy() for n in names]
        if len(args) != 1:
            raise TypeError("run(inputs) or run(output_names, input_feed)")
        return super().run(args[0])


class Served:
    """A model served over HTTP (the Open Inference Protocol v2) in this process."""

    def __init__(self, server, port, model_name):
        self._server = server
        self.port = port
        self.model_name = model_name
        self.url = f"http://127.0.0.1:{port}"

    def infer(self, *inputs, timeout=30):
        """Sends one OIP infer request (JSON) and returns the outputs as NumPy arrays."""
        import numpy as np
        body = {"inputs": []}
        for i, x in enumerate(inputs):
            a = np.asarray(x.numpy() if isinstance(x, _kiln.Tensor) else x)
            dtype = {"float32": "FP32", "float64": "FP64", "int64": "INT64", "int32": "INT32",
                     "uint8": "UINT8", "bool": "BOOL"}[a.dtype.name]
            body["inputs"].append({"name": f"input{'' if i == 0 else '_' + str(i)}", "shape": list(a.shape),
                                   "datatype": dtype, "data": a.reshape(-1).tolist()})
        request = urllib.request.Request(f"{self.url}/v2/models/{self.model_name}/infer",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            reply = json.load(response)
        return [np.asarray(o["data"]).reshape(o["shape"]) for o in reply["outputs"]]

    def shutdown(self):
        self._server.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
        return False


def serve(model, port=0, host="127.0.0.1"):
    """Serves an ONNX file (or a model repository folder) over HTTP, in the background.

    Returns a Served object once the server is ready: ``.url``, ``.infer(x)``,
    ``.shutdown()``; usable as a context manager. Port 0 picks a free port.
    """
    if not hasattr(_kiln, "Server"):
        raise RuntimeError("kiln.serve: this kiln was built without serving (KILN_BUILD_SERVE=OFF); "
                           "rebuild with it on, or serve the file with another build's `kiln serve`")
    path = os.fspath(model)
    if os.path.isdir(path):
        server = _kiln.Server(model_repository=path, host=host, port=port)
        name = ""
    else:
        server = _kiln.Server(model=path, host=host, port=port)
        name = os.path.splitext(os.path.basename(path))[0]
    return Served(server, server.start(), name)
