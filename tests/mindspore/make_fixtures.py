#!/usr/bin/env python3
"""Writes MindSpore files for Kiln's tests, and what Kiln should read from them.

The files are built with MindSpore's own schemas (proto/mindspore, compiled
here with protoc), following the primitive names and attributes of
MindSpore's operator definitions and the layout its exporter writes: nodes
that apply primitives by reference ("REF::Conv2D:3"), constants, parameters
read through Load and ordered by UpdateState and Depend, tuples taken apart
by TupleGetItem. The expected outputs are computed here with NumPy.

    make_fixtures.py OUT_DIR

OUT_DIR/<model>.mindir, <model>.input*.npy, <model>.output*.npy for a LeNet,
a ResNet block, an MLP, a Transformer encoder layer, an LSTM and one of
assorted primitives, and one applying primitives Kiln lacks; checkpoints
(weights.ckpt with MindSpore's names and optimizer state, its tensors as
ckpt_reference/<tag>.npy) and broken files (truncated, encrypted-looking).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "proto", "mindspore")


def compile_schemas():
    out = tempfile.mkdtemp(prefix="kiln_ms_proto_")
    subprocess.run(["protoc", f"--python_out={out}", f"-I{PROTO}", "checkpoint.proto", "mind_ir.proto"],
                   check=True, cwd=PROTO)
    sys.path.insert(0, out)
    try:
        import checkpoint_pb2
        import mind_ir_pb2
    except ImportError as e:
        sys.exit(f"make_fixtures.py needs Python's protobuf package (Debian: python3-protobuf): {e}")
    return checkpoint_pb2, mind_ir_pb2


ckpt_pb, ir = compile_schemas()
A = ir.AttributeProto
T = ir.TensorProto
DTYPES = {np.float32: T.FLOAT, np.float16: T.FLOAT16, np.int64: T.INT64, np.int32: T.INT32, np.bool_: T.BOOL}
rng = np.random.default_rng(7)


def rand(*shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# --- NumPy references -------------------------------------------------------

def conv2d(x, w, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    og = o // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg].astype(np.float64)
        ws = w[g * og:(g + 1) * og].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dilation[0]:i * dilation[0] + stride[0] * (oh - 1) + 1:stride[0],
                           j * dilation[1]:j * dilation[1] + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out


def same_pads(size, kernel, stride, dilation=(1, 1)):
    pads = []
    for i in range(2):
        out = -(-size[i] // stride[i])
        total = max(0, (out - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - size[i])
        pads += [total // 2, total - total // 2]
    return pads


def pool(x, k, s, mode, same=False):
    pads = same_pads(x.shape[2:], k, s) if same else [0, 0, 0, 0]
    fill = -np.inf if mode == "max" else 0.0
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])), constant_values=fill)
    ones = np.pad(np.ones(x.shape[2:]), ((pads[0], pads[1]), (pads[2], pads[3])))
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]]
            if mode == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                out[:, :, i, j] = win.sum(axis=(2, 3)) / ones[i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]].sum()
    return out


def batch_norm(x, gamma, beta, mean, var, eps):
    shape = (1, -1, 1, 1)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) + beta.reshape(shape)


def layer_norm(x, gamma, beta, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * gamma + beta


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def lstm(x, w_ih, w_hh, b, h, c):
    ys = []
    for t in range(x.shape[0]):
        gates = x[t] @ w_ih.T + h @ w_hh.T + b
        i, f, g, o = np.split(gates, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys), h, c


# --- MindIR ------------------------------------------------------------------

class MindIR:
    """A graph as MindSpore's exporter writes it."""

    def __init__(self, name):
        self.model = ir.ModelProto(ir_version="0.1.1", producer_name="MindSpore", model_version="2.3.0",
                                   little_endian=True, mind_ir_version=1)
        self.g = self.model.graph
        self.g.name = name
        self.uid = 0
        self.monad = self.const("umonad")
        self.loads = []

    def next(self):
        self.uid += 1
        return self.uid

    def input(self, name, shape, dtype=T.FLOAT):
        v = self.g.input.add(name=f"{self.g.name}:{name}")
        v.tensor.add(dims=shape, data_type=dtype)
        return v.name

    def param(self, name, array):
        p = self.g.parameter.add(name=f"{self.g.name}:{name}", dims=array.shape, data_type=DTYPES[array.dtype.type])
        p.raw_data = array.tobytes()
        # Parameters are read through Load(param, U), ordered by UpdateState.
        load = self.apply("Load", [p.name, self.monad])
        self.loads.append(load)
        return load

    @staticmethod
    def set_value(a, value):
        if isinstance(value, str) and value == "umonad":
            a.type = A.UMONAD
        elif isinstance(value, np.ndarray):
            a.type = A.TENSORS
            a.tensors.add(name="value0", dims=value.shape, data_type=DTYPES[value.dtype.type], raw_data=value.tobytes())
        elif isinstance(value, type) and value in DTYPES:  # a type, as Cast's second input
            a.type = A.TENSORS
            a.tensors.add(name="value0", data_type=DTYPES[value])
        elif isinstance(value, bool):
            a.type, a.i = A.BOOL, int(value)
        elif isinstance(value, int):
            a.type, a.i = A.INT64, value
        elif isinstance(value, float):
            a.type, a.f = A.FLOAT, value
        elif isinstance(value, str):
            a.type, a.s = A.STRING, value.encode()
        elif isinstance(value, tuple):
            a.type = A.TUPLE
            for v in value:  # items of a sequence keep their scalars in the repeated fields
                item = a.values.add()
                if isinstance(v, tuple):
                    MindIR.set_value(item, v)
                elif isinstance(v, bool):
                    item.type = A.BOOL
                    item.ints.append(int(v))
                elif isinstance(v, int):
                    item.type = A.INT64
                    item.ints.append(v)
                else:
                    item.type = A.FLOAT
                    item.floats.append(v)
        else:
            raise TypeError(value)

    def const(self, value):
        n = self.g.node.add(op_type="Constant")
        n.name = f"{self.g.name}:ValueNode_{self.next()}"
        n.output.append(n.name)
        self.set_value(n.attribute.add(name="value"), value)
        return n.name

    def apply(self, primitive, inputs, outputs=1, **attrs):
        prim = self.model.primitives.add(name=f"{primitive}:{self.next()}", op_type=primitive,
                                         instance_name=primitive.lower())
        for k, v in attrs.items():
            self.set_value(prim.attribute.add(name=k), v)
        n = self.g.node.add(op_type="REF::" + prim.name, domain="Default/network")
        n.name = f"{self.g.name}:CNode_{self.next()}:{self.uid}"
        n.output.append(n.name)
        n.input.extend(inputs)
        shape = n.attribute.add(name="shape")
        if outputs > 1:
            shape.type = A.TUPLE
            for _ in range(outputs):
                shape.values.add(type=A.TENSORS)
        else:
            shape.type = A.TENSORS
        return n.name

    def item(self, tuple_name, i):
        return self.apply("TupleGetItem", [tuple_name, self.const(i)])

    def finish(self, result, shapes):
        """Ends the graph: UpdateState over the loads, Depend on it, the output."""
        state = self.apply("UpdateState", [self.monad] + self.loads)
        out = self.apply("Depend", [result, state])
        v = self.g.output.add(name=out)
        if len(shapes) == 1:
            v.tensor.add(dims=shapes[0], data_type=T.FLOAT)
        else:
            v.attr_info.type = A.TUPLE
            for s in shapes:
                v.attr_info.values.add(type=A.TENSORS).tensors.add(dims=s, data_type=T.FLOAT)
        return self.model


def dense(m, x, w, b):
    """nn.Dense: MatMul with transpose_b, then BiasAdd."""
    return m.apply("BiasAdd", [m.apply("MatMul", [x, m.param(w[0], w[1])], transpose_a=False, transpose_b=True),
                               m.param(b[0], b[1])], format="NCHW")


def lenet():
    m = MindIR("lenet5_1")
    x = rand(2, 1, 32, 32, scale=1.0)
    w1, w2 = rand(6, 1, 5, 5), rand(16, 6, 5, 5, scale=0.2)
    f1, b1, f2, b2, f3, b3 = rand(120, 400, scale=0.1), rand(120), rand(84, 120, scale=0.1), rand(84), rand(10, 84), rand(10)
    conv = dict(out_channel=6, kernel_size=(5, 5), mode=1, pad_mode="valid", pad=(0, 0, 0, 0), stride=(1, 1, 1, 1),
                dilation=(1, 1, 1, 1), group=1, format="NCHW")
    pool_attrs = dict(kernel_size=(1, 1, 2, 2), strides=(1, 1, 2, 2), pad_mode="VALID", format="NCHW")
    h = m.input("x", x.shape)
    h = m.apply("ReLU", [m.apply("Conv2D", [h, m.param("conv1.weight", w1)], **conv)])
    h = m.apply("MaxPool", [h], **pool_attrs)
    h = m.apply("ReLU", [m.apply("Conv2D", [h, m.param("conv2.weight", w2)], **dict(conv, out_channel=16))])
    h = m.apply("MaxPool", [h], **pool_attrs)
    h = m.apply("Flatten", [h])
    h = m.apply("ReLU", [dense(m, h, ("fc1.weight", f1), ("fc1.bias", b1))])
    h = m.apply("ReLU", [dense(m, h, ("fc2.weight", f2), ("fc2.bias", b2))])
    h = dense(m, h, ("fc3.weight", f3), ("fc3.bias", b3))
    relu = lambda v: np.maximum(v, 0)
    r = pool(relu(conv2d(x, w1)), (2, 2), (2, 2), "max")
    r = pool(relu(conv2d(r, w2)), (2, 2), (2, 2), "max").reshape(2, -1)
    r = relu(relu(r @ f1.T + b1) @ f2.T + b2) @ f3.T + b3
    return m.finish(h, [r.shape]), [x], [r]


def resnet_block():
    """A bottleneck-free residual block with a strided "same" shortcut and an average pool."""
    m = MindIR("resnet_block_2")
    x = rand(2, 8, 9, 9, scale=1.0)
    bn = lambda c: (rand(c) + 1, rand(c), rand(c, scale=0.1), np.abs(rand(c)) + 0.5)
    w1, w2, ws = rand(16, 8, 3, 3, scale=0.2), rand(16, 16, 3, 3, scale=0.1), rand(16, 8, 1, 1)
    p1, p2, ps = bn(16), bn(16), bn(16)
    conv = dict(out_channel=16, kernel_size=(3, 3), mode=1, pad_mode="pad", pad=(1, 1, 1, 1), stride=(1, 1, 2, 2),
                dilation=(1, 1, 1, 1), group=1, format="NCHW")

    def batch_norm_node(h, name, p):
        params = [m.param(f"{name}.{k}", v) for k, v in zip(("gamma", "beta", "moving_mean", "moving_variance"), p)]
        return m.item(m.apply("BatchNorm", [h] + params, outputs=5, is_training=False, epsilon=1e-5, momentum=0.1,
                              format="NCHW"), 0)

    h = m.input("x", x.shape)
    y = m.apply("ReLU", [batch_norm_node(m.apply("Conv2D", [h, m.param("conv1.weight", w1)], **conv), "bn1", p1)])
    y = batch_norm_node(m.apply("Conv2D", [y, m.param("conv2.weight", w2)], **dict(conv, stride=(1, 1, 1, 1))), "bn2", p2)
    # pad_mode and format as MindSpore's enums (1: same, 0: NCHW), the form a primitive holds in memory.
    s = m.apply("Conv2D", [h, m.param("down.weight", ws)],
                **dict(conv, kernel_size=(1, 1), pad_mode=1, pad=(0, 0, 0, 0), format=0))
    s = batch_norm_node(s, "down_bn", ps)
    y = m.apply("ReLU", [m.apply("Add", [y, s])])
    y = m.apply("AvgPool", [y], kernel_size=(1, 1, 2, 2), strides=(1, 1, 2, 2), pad_mode="SAME", format="NCHW")
    relu = lambda v: np.maximum(v, 0)
    r = relu(batch_norm(conv2d(x, w1, (2, 2), (1, 1, 1, 1)), *p1, 1e-5))
    r = batch_norm(conv2d(r, w2, (1, 1), (1, 1, 1, 1)), *p2, 1e-5)
    r = relu(r + batch_norm(conv2d(x, ws, (2, 2), same_pads((9, 9), (1, 1), (2, 2))), *ps, 1e-5))
    r = pool(r, (2, 2), (2, 2), "avg", same=True)
    return m.finish(y, [r.shape]), [x], [r]


def mlp():
    """Dense layers with GeLU, a float16 round trip, and two outputs (logits, probabilities)."""
    m = MindIR("mlp_3")
    x = rand(4, 20, scale=1.0)
    w1, b1, w2, b2 = rand(32, 20, scale=0.3), rand(32), rand(5, 32, scale=0.3), rand(5)
    h = m.input("x", x.shape)
    h = m.apply("GeLU", [dense(m, h, ("dense1.weight", w1), ("dense1.bias", b1))])
    h = m.apply("Cast", [m.apply("Cast", [h, m.const(np.float16)]), m.const(np.float32)])
    logits = dense(m, m.apply("Mul", [h, m.const(0.5)]), ("dense2.weight", w2), ("dense2.bias", b2))
    probs = m.apply("Softmax", [logits], axis=(-1,))
    r = gelu_tanh(x @ w1.T + b1).astype(np.float16).astype(np.float32) * np.float32(0.5)
    r = r @ w2.T + b2
    return m.finish(m.apply("MakeTuple", [logits, probs]), [r.shape, r.shape]), [x], [r, softmax(r)]


def transformer_layer():
    """A post-norm encoder layer as MindSpore's nn.TransformerEncoderLayer computes it."""
    m = MindIR("transformer_4")
    b, s, e, heads = 2, 7, 16, 4
    d = e // heads
    x = rand(b, s, e, scale=1.0)
    wq, wk, wv, wo = (rand(e, e, scale=0.3) for _ in range(4))
    bq, bk, bv, bo = (rand(e, scale=0.1) for _ in range(4))
    w1, b1, w2, b2 = rand(32, e, scale=0.3), rand(32, scale=0.1), rand(e, 32, scale=0.3), rand(e, scale=0.1)
    g1, be1, g2, be2 = rand(e) + 1, rand(e), rand(e) + 1, rand(e)
    h = m.input("src", x.shape)
    flat = m.apply("Reshape", [h, m.const((-1, e))])

    def heads_of(name, w, bias):
        p = dense(m, flat, (f"{name}.weight", w), (f"{name}.bias", bias))
        p = m.apply("Reshape", [p, m.const((b, s, heads, d))])
        return m.apply("Transpose", [p, m.const((0, 2, 1, 3))])

    q, k, v = heads_of("q_proj", wq, bq), heads_of("k_proj", wk, bk), heads_of("v_proj", wv, bv)
    scores = m.apply("Mul", [m.apply("BatchMatMul", [q, k], transpose_a=False, transpose_b=True),
                             m.const(np.array(1 / np.sqrt(d), np.float32))])
    att = m.apply("BatchMatMul", [m.apply("Softmax", [scores], axis=(-1,)), v], transpose_a=False, transpose_b=False)
    att = m.apply("Reshape", [m.apply("Transpose", [att, m.const((0, 2, 1, 3))]), m.const((-1, e))])
    att = dense(m, att, ("out_proj.weight", wo), ("out_proj.bias", bo))
    ln = dict(begin_norm_axis=-1, begin_params_axis=-1, epsilon=1e-5)
    y = m.apply("Add", [flat, att])
    y = m.item(m.apply("LayerNorm", [y, m.param("norm1.gamma", g1), m.param("norm1.beta", be1)], outputs=3, **ln), 0)
    f = dense(m, m.apply("GeLU", [dense(m, y, ("linear1.weight", w1), ("linear1.bias", b1))]),
              ("linear2.weight", w2), ("linear2.bias", b2))
    y = m.item(m.apply("LayerNorm", [m.apply("Add", [y, f]), m.param("norm2.gamma", g2), m.param("norm2.beta", be2)],
                       outputs=3, **ln), 0)
    y = m.apply("Reshape", [y, m.const((b, s, e))])
    xf = x.reshape(-1, e).astype(np.float64)
    split = lambda t: t.reshape(b, s, heads, d).transpose(0, 2, 1, 3)
    qq, kk, vv = split(xf @ wq.T + bq), split(xf @ wk.T + bk), split(xf @ wv.T + bv)
    a = softmax(qq @ kk.transpose(0, 1, 3, 2) / np.sqrt(d)) @ vv
    a = a.transpose(0, 2, 1, 3).reshape(-1, e) @ wo.T + bo
    r = layer_norm(xf + a, g1, be1, 1e-5)
    r = layer_norm(r + gelu_tanh(r @ w1.T + b1) @ w2.T + b2, g2, be2, 1e-5)
    return m.finish(y, [(b, s, e)]), [x], [r.reshape(b, s, e)]


def lstm_model():
    """Batch-first input, the LSTM primitive with its flat weight (w_ih, w_hh, then b_ih + b_hh)."""
    m = MindIR("lstm_5")
    n, t, i, hsz = 3, 6, 5, 8
    x = rand(n, t, i, scale=1.0)
    w_ih, w_hh, b_ih, b_hh = rand(4 * hsz, i), rand(4 * hsz, hsz), rand(4 * hsz), rand(4 * hsz)
    flat = np.concatenate([w_ih.ravel(), w_hh.ravel(), (b_ih + b_hh)]).reshape(-1, 1, 1)
    h0, c0 = rand(1, n, hsz), rand(1, n, hsz)
    h = m.input("x", x.shape)
    seq = m.apply("Transpose", [h, m.const((1, 0, 2))])
    out = m.apply("LSTM", [seq, m.param("h0", h0), m.param("c0", c0), m.param("weight", flat)], outputs=5,
                  input_size=i, hidden_size=hsz, num_layers=1, has_bias=True, bidirectional=False, dropout=0.0)
    y = m.apply("Transpose", [m.item(out, 0), m.const((1, 0, 2))])
    h_n = m.item(out, 1)
    ys, hn, _ = lstm(x.transpose(1, 0, 2).astype(np.float64), w_ih, w_hh, b_ih + b_hh, h0[0], c0[0])
    return (m.finish(m.apply("MakeTuple", [y, h_n]), [(n, t, hsz), (1, n, hsz)]), [x],
            [ys.transpose(1, 0, 2), hn[None]])


def more_primitives():
    """Slicing, padding, activations, adaptive pooling, split and stack, tile, select, arg-max and one-hot."""
    m = MindIR("primitives_7")
    x = rand(2, 3, 8, 8, scale=2.0)
    h = m.input("x", x.shape)
    s = m.apply("StridedSlice", [h, m.const((0, 0, 1, 0)), m.const((0, 3, 7, 8)), m.const((1, 1, 2, 1))],
                begin_mask=1, end_mask=1, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0)
    p = m.apply("Pad", [s], paddings=((0, 0), (0, 0), (1, 1), (2, 0)))
    a = m.apply("ReLU6", [m.apply("Mul", [p, m.const(3.0)])])
    b = m.apply("LeakyReLU", [p], alpha=0.1)
    c, d, e = m.apply("HSigmoid", [p]), m.apply("SiLU", [p]), m.apply("Softplus", [p])
    t = m.apply("Add", [m.apply("Add", [a, b]), m.apply("Add", [c, m.apply("Sub", [d, e])])])
    g = m.apply("AdaptiveAvgPool2D", [t], output_size=(2, 5))
    parts = m.apply("Split", [g], outputs=3, axis=1, output_num=3)
    st = m.apply("Stack", [m.apply("MakeTuple", [m.item(parts, 0), m.item(parts, 2)])], axis=0)
    tl = m.apply("Tile", [m.apply("Squeeze", [st], axis=(2,)), m.const((1, 1, 2, 1))])
    sel = m.apply("Select", [m.apply("Greater", [tl, m.const(np.array(0.5, np.float32))]), tl, m.apply("Neg", [tl])])
    total = m.apply("ReduceSum", [sel, m.const((3,))], keep_dims=True)
    flat = m.apply("Reshape", [sel, m.const((4, 20))])
    am = m.apply("Argmax", [flat], axis=-1, output_type=np.int32)
    oh = m.apply("OneHot", [am, m.const(20), m.const(np.array(1.0, np.float32)), m.const(np.array(0.0, np.float32))],
                 axis=-1)
    amv = m.item(m.apply("ArgMaxWithValue", [flat], outputs=2, axis=1, keep_dims=False), 1)
    row = m.apply("StridedSlice", [oh, m.const((1, 0)), m.const((2, 20)), m.const((1, 1))],
                  begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=1)

    xs = x[:, 0:3, 1:7:2, 0:8].astype(np.float64)
    xp = np.pad(xs, ((0, 0), (0, 0), (1, 1), (2, 0)))
    relu6 = np.clip(xp * 3, 0, 6)
    r = relu6 + np.where(xp > 0, xp, 0.1 * xp) + (np.clip(xp + 3, 0, 6) / 6 + (xp * sigmoid(xp) - np.log1p(np.exp(xp))))
    hh, ww = r.shape[2:]
    pooled = np.zeros(r.shape[:2] + (2, 5))
    for i in range(2):
        for j in range(5):
            pooled[:, :, i, j] = r[:, :, i * hh // 2:-(-(i + 1) * hh // 2), j * ww // 5:-(-(j + 1) * ww // 5)].mean((2, 3))
    stacked = np.stack([pooled[:, 0:1], pooled[:, 2:3]], 0)[:, :, 0]
    tiled = np.tile(stacked, (1, 1, 2, 1))
    chosen = np.where(tiled > 0.5, tiled, -tiled)
    flat_r = chosen.reshape(4, 20)
    idx = flat_r.argmax(-1)
    hot = np.eye(20)[idx]
    outputs = [chosen.sum(3, keepdims=True), idx.astype(np.int32), hot, flat_r.max(1), hot[1]]
    model = m.finish(m.apply("MakeTuple", [total, am, oh, amv, row]), [o.shape for o in outputs])
    return model, [x], outputs


def unsupported():
    """Primitives Kiln lacks (two of one, one of another): a load lists them all."""
    m = MindIR("unsupported_6")
    h = m.input("x", (2, 3))
    h = m.apply("FancyActivation", [m.apply("FancyActivation", [m.apply("ReLU", [h])])])
    h = m.apply("CumulativeLogSumExp", [h], axis=0)
    return m.finish(h, [(2, 3)])


# --- checkpoints --------------------------------------------------------------

CKPT_TYPES = {np.float32: "Float32", np.float16: "Float16", np.int32: "Int32", np.int64: "Int64", np.uint8: "UInt8",
              np.bool_: "Bool", np.float64: "Float64"}


def save_ckpt(path, entries, slice_bytes=4096):
    """As MindSpore's save_checkpoint: one message per slice of a large tensor, appended."""
    with open(path, "wb") as f:
        for name, value in entries:
            c = ckpt_pb.Checkpoint()
            if isinstance(value, str):
                v = c.value.add(tag=name)
                v.tensor.tensor_type = "str"
                v.tensor.tensor_content = value.encode()
                f.write(c.SerializeToString())
                continue
            dims = list(value.shape) if value.shape != () else [0]
            parts = np.array_split(value, -(-value.nbytes // slice_bytes)) if value.nbytes > slice_bytes else [value]
            for part in parts:
                c = ckpt_pb.Checkpoint()
                v = c.value.add(tag=name)
                v.tensor.dims.extend(dims)
                v.tensor.tensor_type = CKPT_TYPES[value.dtype.type]
                v.tensor.tensor_content = np.ascontiguousarray(part).tobytes()
                f.write(c.SerializeToString())


def checkpoints(out):
    weights = [
        ("conv1.weight", rand(4, 3, 3, 3)),
        ("bn1.gamma", rand(4) + 1), ("bn1.beta", rand(4)),
        ("bn1.moving_mean", rand(4)), ("bn1.moving_variance", np.abs(rand(4)) + 0.5),
        ("conv1d.weight", rand(6, 4, 1, 3)),  # nn.Conv1d's weight, stored as the 2-D convolution it runs as
        ("lstm.w_ih_list.0", rand(32, 6)), ("lstm.w_hh_list.0", rand(32, 8)),
        ("lstm.b_ih_list.0", rand(32)), ("lstm.b_hh_list.0", rand(32)),
        ("embedding.embedding_table", rand(50, 8)),
        ("fc.weight", rand(10, 200, scale=0.1)), ("fc.bias", rand(10)),  # 8000 bytes: saved in two slices
    ]
    state = [("moments.conv1.weight", np.zeros((4, 3, 3, 3), np.float32)),
             ("moments.fc.weight", np.zeros((10, 200), np.float32)),
             ("global_step", np.array([120], np.int32)), ("learning_rate", np.array(0.01, np.float32))]
    save_ckpt(os.path.join(out, "weights.ckpt"), weights + state + [("epoch_note", "trained on MNIST")])
    ref = os.path.join(out, "ckpt_reference")
    os.makedirs(ref, exist_ok=True)
    for name, value in weights + state:
        np.save(os.path.join(ref, name + ".npy"), value)
    data = open(os.path.join(out, "weights.ckpt"), "rb").read()
    open(os.path.join(out, "truncated.ckpt"), "wb").write(data[: len(data) // 2])
    # What an encrypted checkpoint looks like to a reader without the key.
    open(os.path.join(out, "encrypted.ckpt"), "wb").write(bytes([0x0a, 0x20]) + rng.bytes(4000))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, make in [("lenet", lenet), ("resnet_block", resnet_block), ("mlp", mlp),
                       ("transformer_layer", transformer_layer), ("lstm", lstm_model),
                       ("primitives", more_primitives)]:
        model, inputs, outputs = make()
        with open(os.path.join(out, name + ".mindir"), "wb") as f:
            f.write(model.SerializeToString())
        for k, x in enumerate(inputs):
            np.save(os.path.join(out, f"{name}.input{k}.npy"), x)
        for k, y in enumerate(outputs):
            np.save(os.path.join(out, f"{name}.output{k}.npy"), np.asarray(y, np.float32))
    with open(os.path.join(out, "unsupported.mindir"), "wb") as f:
        f.write(unsupported().SerializeToString())
    checkpoints(out)
    data = open(os.path.join(out, "lenet.mindir"), "rb").read()
    open(os.path.join(out, "truncated.mindir"), "wb").write(data[: len(data) // 3])


if __name__ == "__main__":
    main()
