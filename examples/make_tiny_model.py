#!/usr/bin/python3
"""Writes the bundled example's small model: y = x * 2 + 1 over float32 [N, 4]
(a dynamic batch dim), into a versioned model directory."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1] if len(sys.argv) > 1 else "examples/models/tiny/1/model.onnx"
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
two = numpy_helper.from_array(np.full([4], 2.0, np.float32), "two")
one = numpy_helper.from_array(np.full([4], 1.0, np.float32), "one")
graph = helper.make_graph(
    [helper.make_node("Mul", ["x", "two"], ["t"]), helper.make_node("Add", ["t", "one"], ["y"])],
    "tiny", [x], [y], [two, one])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
onnx.save(model, out)
print(f"wrote {out}")
