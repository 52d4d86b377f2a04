"""A small KServe v2 HTTP client for the tests (urllib / http.client only), with
Triton's binary tensor data extension, and helpers to find sipd's HTTP port."""

import http.client
import json
import re
import struct
import urllib.error
import urllib.request

import numpy as np

from harness import WAIT_TIMEOUT_S, wait_until

DATATYPE = {
    "bool": "BOOL", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
    "float16": "FP16", "float32": "FP32", "float64": "FP64", "string": "BYTES",
}
NUMPY = {v: k for k, v in DATATYPE.items()}


def printed_address(srv, scheme, timeout=WAIT_TIMEOUT_S):
    """The SCHEME://host:port sipd printed ("sipd: listening on http://...")."""
    m = wait_until(lambda: re.search(r"listening on (%s://[^\s]+)" % scheme, srv.log()), timeout,
                   lambda: "sipd to print its %s address:\n%s" % (scheme, srv.log_tail()))
    return m.group(1)


def http_base(srv, timeout=WAIT_TIMEOUT_S):
    """The http://host:port sipd printed."""
    return printed_address(srv, "http", timeout)


class Reply:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body

    def json(self):
        return json.loads(self.body[:self.header_len()] if self.header_len() else self.body)

    def header_len(self):
        v = self.headers.get("inference-header-content-length")
        return int(v) if v is not None else None

    def __repr__(self):
        return "Reply(%d, %r)" % (self.status, self.body[:300])


def request(method, url, body=None, headers=None, timeout=30):
    """(status, headers, body) of one request; non-2xx answers are returned too."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())


def get(url, **kw):
    return request("GET", url, **kw)


def to_kserve_bytes(arr):
    """BYTES elements, each a 4-byte little-endian length then the bytes."""
    out = bytearray()
    for v in arr.ravel():
        b = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        out += struct.pack("<I", len(b)) + b
    return bytes(out)


def from_kserve_bytes(buf, shape):
    items, off = [], 0
    while off < len(buf):
        (n,) = struct.unpack_from("<I", buf, off)
        items.append(bytes(buf[off + 4:off + 4 + n]))
        off += 4 + n
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    return arr.reshape(shape)


def dtype_name(arr):
    return "string" if arr.dtype == object or arr.dtype.kind in "SU" else arr.dtype.name


def json_data(arr, nested=True):
    if dtype_name(arr) == "string":
        flat = [v.decode("utf-8") if isinstance(v, bytes) else v for v in arr.ravel()]
        return np.array(flat, dtype=object).reshape(arr.shape).tolist() if nested else flat
    return arr.tolist() if nested else arr.ravel().tolist()


def build_request(inputs, outputs=None, binary_inputs=(), params=None, id=None, nested=True):
    """Body and headers of an infer request. inputs: {name: ndarray}; names in
    binary_inputs travel as binary data; outputs: [name] or [(name, {params})]."""
    doc, blobs = {"inputs": []}, []
    if id is not None:
        doc["id"] = id
    if params:
        doc["parameters"] = params
    for name, arr in inputs.items():
        t = {"name": name, "shape": list(arr.shape), "datatype": DATATYPE[dtype_name(arr)]}
        if name in binary_inputs:
            raw = to_kserve_bytes(arr) if dtype_name(arr) == "string" else arr.tobytes()
            t["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            t["data"] = json_data(arr, nested)
        doc["inputs"].append(t)
    if outputs is not None:
        doc["outputs"] = [{"name": o} if isinstance(o, str) else {"name": o[0], "parameters": o[1]}
                          for o in outputs]
    head = json.dumps(doc).encode()
    headers = {"Content-Type": "application/json"}
    if blobs:
        headers["Inference-Header-Content-Length"] = str(len(head))
    return head + b"".join(blobs), headers


def decode_outputs(reply):
    """{name: ndarray} of a successful infer reply (JSON and binary outputs)."""
    hl = reply.header_len()
    doc = json.loads(reply.body[:hl] if hl is not None else reply.body)
    off = hl or 0
    out = {}
    for o in doc["outputs"]:
        dt, shape = NUMPY[o["datatype"]], tuple(o["shape"])
        size = (o.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            raw = reply.body[off:off + size]
            off += size
            out[o["name"]] = (from_kserve_bytes(raw, shape) if dt == "string"
                              else np.frombuffer(raw, dtype=dt).reshape(shape))
        elif dt == "string":
            arr = np.empty(int(np.prod(shape)), dtype=object)
            arr[:] = [s.encode("utf-8") for s in o["data"]]
            out[o["name"]] = arr.reshape(shape)
        else:
            out[o["name"]] = np.array(o["data"], dtype=dt).reshape(shape)
    assert off == len(reply.body) if hl is not None else True, "unread binary data"
    return doc, out


def infer(base, model, inputs, version=None, **kw):
    body, headers = build_request(inputs, **kw)
    path = "/v2/models/%s%s/infer" % (model, "/versions/" + version if version else "")
    return request("POST", base + path, body=body, headers=headers)


def connection(base, timeout=30):
    host, port = base[len("http://"):].rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=timeout)
