"""Small ONNX models for the integration tests, generated with python3-onnx.

Opset 17, IR version 8 (ONNX Runtime 1.29 runs both). Each builder returns a
ModelProto; write_all(dir) writes them all and returns name -> path.

  id_<dtype>   inputs  x [N, M] <dtype>, s [] <dtype>  (a 0-d scalar)
               outputs y = Identity(x), t = Identity(s)      -- every dtype, string included
  addmul       inputs  a [N, 4] float32, b [N, 4] float32
               output  y = a * b + a
  scalar       inputs  s [] float32, v [N] float32
               outputs y = v * s [N], s2 = s + s []
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
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["s"], ["t"])],
        "id_" + dtype,
        [helper.make_tensor_value_info("x", t, ["N", "M"]),
         helper.make_tensor_value_info("s", t, [])],
        [helper.make_tensor_value_info("y", t, ["N", "M"]),
         helper.make_tensor_value_info("t", t, [])])
    return _model(g)


def addmul():
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["ab"]), helper.make_node("Add", ["ab", "a"], ["y"])],
        "addmul",
        [helper.make_tensor_value_info("a", f, ["N", 4]),
         helper.make_tensor_value_info("b", f, ["N", 4])],
        [helper.make_tensor_value_info("y", f, ["N", 4])])
    return _model(g)


def addmul_ref(a, b):
    return a * b + a


def scalar():
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("Mul", ["v", "s"], ["y"]), helper.make_node("Add", ["s", "s"], ["s2"])],
        "scalar",
        [helper.make_tensor_value_info("s", f, []),
         helper.make_tensor_value_info("v", f, ["N"])],
        [helper.make_tensor_value_info("y", f, ["N"]),
         helper.make_tensor_value_info("s2", f, [])])
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
