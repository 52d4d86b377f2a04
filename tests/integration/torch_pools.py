"""Pool entries for the backend-agnostic tests (test_inference.py,
test_errors.py, test_batching.py): the declarations the TorchScript twins of
models.py's ONNX models need (a TorchScript file records no dtypes or
shapes) and pool(...), which builds an entry for either backend. No torch is
imported here, so those tests load (and run on onnxruntime) where torch is
missing; the models themselves are torch_models.py's."""

# sip dtypes libtorch has (no unsigned type wider than 8 bits, no strings).
TORCH_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32",
                "float64"]


def _io(dt, names_shapes):
    return "; ".join("%s:%s%s" % (n, dt, s) for n, s in names_shapes)


OPTIONS = {"id_" + dt: {"inputs": _io(dt, [("data", "[-1,-1]"), ("scalar", "[]")]),
                        "outputs": _io(dt, [("data_out", "[-1,-1]"), ("scalar_out", "[]")])}
           for dt in TORCH_DTYPES}
OPTIONS.update({
    "addmul": {"inputs": "lhs:float32[-1,4]; rhs:float32[-1,4]", "outputs": "y:float32[-1,4]"},
    "scalar": {"inputs": "scale:float32[]; vec:float32[-1]",
               "outputs": "y:float32[-1]; scale2:float32[]"},
    "two_out": {"inputs": "x:float32[-1,4]", "outputs": "sum:float32[-1,4]; prod:float32[-1,4]"},
    "mlp": {"inputs": "x:float32[-1,4]", "outputs": "y:float32[-1,3]"},
    "named": {"inputs": "x:float32[-1,2]", "outputs": "double:float32[-1,2]; count:int64[1]"},
})


def pool(name, which, onnx_dir, torch_dir, **extra):
    """A session pool entry serving model `name` on backend `which`
    ("onnxruntime": the ONNX file of models.py; "torchscript": this module's
    file and its declarations). `extra` keys are added to the entry."""
    p = {"name": extra.pop("pool_name", name)}
    if which == "torchscript":
        p.update(model_path=str(torch_dir[name]), backend="torchscript",
                 backend_options=dict(OPTIONS[name]))
    else:
        p.update(model_path=str(onnx_dir[name]))
    p.update(extra)
    return p
