"""Small ONNX models for the integration tests, generated with python3-onnx.

Opset 17, IR version 8 (ONNX Runtime 1.29 runs both). Each builder returns a
ModelProto; write_all(dir) writes them all and returns name -> path.

  id_<dtype>   inputs  data [N, M] <dtype>, scalar [] <dtype>  (a 0-d scalar)
               outputs data_out = Identity(data), scalar_out = Identity(scalar)
               -- every dtype, string included
  addmul       inputs  lhs [N, 4] float32, rhs [N, 4] float32
               output  y = lhs * rhs + lhs
  scalar       inputs  scale [] float32, vec [N] float32
               outputs y = vec * scale [N], scale2 = scale + scale []
  two_out      input   x [N, 4] float32
               outputs sum = x + x, prod = x * x
"""

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17
IR_VERSION = 8

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "string"]

ONNX_TYPE = {
    "bool": TensorProto.BOOL, "int8": TensorProto.INT8, "int16": TensorProto.INT16,
    "int32": TensorProto.INT32, "int64": TensorProto.INT64, "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64,
    "float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
    "string": TensorProto.STRING,
}


def _model(graph):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="sip-tests")
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m)
    return m


def identity(dtype):
    t = ONNX_TYPE[dtype]
    g = helper.make_graph(
        [helper.make_node("Identity", ["data"], ["data_out"]),
         helper.make_node("Identity", ["scalar"], ["scalar_out"])],
        "id_" + dtype,
        [helper.make_tensor_value_info("data", t, ["N", "M"]),
         helper.make_tensor_value_info("scalar", t, [])],
        [helper.make_tensor_value_info("data_out", t, ["N", "M"]),
         helper.make_tensor_value_info("scalar_out", t, [])])
    return _model(g)


def addmul():
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("Mul", ["lhs", "rhs"], ["prod"]),
         helper.make_node("Add", ["prod", "lhs"], ["y"])],
        "addmul",
        [helper.make_tensor_value_info("lhs", f, ["N", 4]),
         helper.make_tensor_value_info("rhs", f, ["N", 4])],
        [helper.make_tensor_value_info("y", f, ["N", 4])])
    return _model(g)


def addmul_ref(lhs, rhs):
    return lhs * rhs + lhs


def scalar():
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("Mul", ["vec", "scale"], ["y"]),
         helper.make_node("Add", ["scale", "scale"], ["scale2"])],
        "scalar",
        [helper.make_tensor_value_info("scale", f, []),
         helper.make_tensor_value_info("vec", f, ["N"])],
        [helper.make_tensor_value_info("y", f, ["N"]),
         helper.make_tensor_value_info("scale2", f, [])])
    return _model(g)


def two_out():
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["sum"]), helper.make_node("Mul", ["x", "x"], ["prod"])],
        "two_out",
        [helper.make_tensor_value_info("x", f, ["N", 4])],
        [helper.make_tensor_value_info("sum", f, ["N", 4]),
         helper.make_tensor_value_info("prod", f, ["N", 4])])
    return _model(g)


def write_all(directory):
    """Writes every model into `directory`; returns {name: Path}."""
    from pathlib import Path
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    builders = {"id_" + dt: (lambda dt=dt: identity(dt)) for dt in DTYPES}
    builders.update(addmul=addmul, scalar=scalar, two_out=two_out)
    for name, build in builders.items():
        p = d / (name + ".onnx")
        onnx.save(build(), str(p))
        out[name] = p
    return out


def write_corrupt(path, n=4096, seed=1234):
    """A file of random bytes where a model should be."""
    rng = np.random.default_rng(seed)
    path.write_bytes(rng.integers(0, 256, size=n, dtype=np.uint8).tobytes())
    return path


def random_array(dtype, shape, rng):
    """Random values of a numpy dtype name ("string": UTF-8 bytes objects)."""
    if dtype == "string":
        words = ["", "a", "héllo", "中文字", "x" * 50, "tab\tnew\nline \"q\" \\"]
        flat = np.empty(int(np.prod(shape)), dtype=object)
        for i in range(flat.size):
            flat[i] = (words[rng.integers(len(words))] + str(i)).encode("utf-8")
        return flat.reshape(shape)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    return (rng.standard_normal(size=shape) * 1000).astype(dt)


def assert_same(out, ref):
    """Equal shape, dtype and elements (bytes for object arrays)."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    if ref.dtype == object:
        assert [bytes(x) for x in out.ravel()] == [bytes(x) for x in ref.ravel()]
    else:
        assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
        assert out.tobytes() == ref.tobytes()  # bit for bit, float16 included
