"""JSON tensor data over KServe v2 HTTP (src/http/kserve_numbers.c): request
bodies written as raw JSON text (every datatype, nested and flat, edge values
and number spellings) against numpy references, bit for bit; the same bodies
and malformed ones answered exactly alike by a server forced to the classic
jansson decoder (SIP_HTTP_JSON_CLASSIC=1); and keep-alive connections spread
over both HTTP event-loop threads."""

import json
import os
import threading

import numpy as np
import pytest

from harness import serve
import kserve as K
import models

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def start(root, model_dir, classic):
    pools = [{"name": "id_" + dt, "model_path": str(model_dir["id_" + dt])} for dt in models.DTYPES]
    if classic:
        os.environ["SIP_HTTP_JSON_CLASSIC"] = "1"
    try:
        return serve(root, pools, server={"http": "127.0.0.1:0", "http_threads": 2})
    finally:
        os.environ.pop("SIP_HTTP_JSON_CLASSIC", None)


@pytest.fixture(scope="module")
def fast(model_dir, tmp_path_factory):
    with start(tmp_path_factory.mktemp("fast"), model_dir, False) as s:
        s.http = K.http_base(s)
        yield s


@pytest.fixture(scope="module")
def classic(model_dir, tmp_path_factory):
    with start(tmp_path_factory.mktemp("classic"), model_dir, True) as s:
        s.http = K.http_base(s)
        yield s


def post(base, dtype, data_text, shape, scalar_text="[0]", binary_out=True):
    """Posts to id_<dtype> an input whose data is the JSON text given."""
    kdt = K.DATATYPE[dtype]
    b = "true" if binary_out else "false"
    outs = (',"outputs":[{"name":"data_out","parameters":{"binary_data":%s}},'
            '{"name":"scalar_out","parameters":{"binary_data":%s}}]' % (b, b))
    body = ('{"inputs":[{"name":"data","datatype":"%s","shape":%s,"data":%s},'
            '{"name":"scalar","datatype":"%s","shape":[],"data":%s}]%s}'
            % (kdt, json.dumps(list(shape)), data_text, kdt, scalar_text, outs))
    return K.request("POST", base + "/v2/models/id_%s/infer" % dtype, body=body.encode(),
                     headers={"Content-Type": "application/json"})


def reference(values, dtype, shape):
    """numpy's reading of the JSON values: Python ints and floats (doubles)
    converted to the dtype, as the protocol defines."""
    if dtype == "bool":
        return np.array(values, dtype=bool).reshape(shape)
    with np.errstate(over="ignore"):  # float16 overflows to infinity, as in sip
        return np.array(values, dtype=object).astype(np.float64 if dtype.startswith("float")
                                                     else dtype).astype(dtype).reshape(shape)


# Values written as JSON text, and the shape they fill.
CASES = {
    "float32": ["0", "-0", "0.0", "-0.0", "1", "-1.5", "1e-7", "1E+2", "-2.5e-3",
                "3.4028234663852886e38", "1.401298464324817e-45", "1e-50", "0.1",
                "0.30000000000000004", "123456789012345678901234567890.5", "9007199254740993",
                "0.333333333333333333333333333", "-65504", "16777217", "2.9802322387695312e-8"],
    "float64": ["0", "-0.0", "5e-324", "2.2250738585072014e-308", "1.7976931348623157e308",
                "0.1", "9007199254740993", "9007199254740993.0", "1.00000000000000011102230246251565404236316680908203125",
                "1e22", "1e23", "-1e-300", "12345678901234567890e-10", "0.000123456789012345678",
                "4.35e15", "1E0", "1e+0", "6.02214076e23", "-7", "8"],
    "float16": ["0", "-0.0", "65504", "65519.99", "65520", "1e-8", "6.103515625e-05",
                "5.960464477539063e-08", "2.98e-8", "0.1", "-1.5", "1e2", "3.14159", "1", "2",
                "-3", "4", "5", "6", "7"],
}
for _dt in INT_DTYPES:
    info = np.iinfo(_dt)
    hi = min(int(info.max), 2**63 - 1)
    CASES[_dt] = [str(int(info.min)), str(hi), "0", "-0", "1", str(hi - 1), str(int(info.min) + 1),
                  "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19"]
CASES["bool"] = ["true", "false"] * 10


@pytest.mark.parametrize("dtype", sorted(CASES))
@pytest.mark.parametrize("nested", [True, False])
def test_values_match_numpy(fast, dtype, nested):
    texts = CASES[dtype]
    shape = (4, 5)
    values = [json.loads(t) for t in texts]
    ref = reference(values, dtype, shape)
    if nested:
        rows = ["[" + ", ".join(texts[r * 5:(r + 1) * 5]) + "]" for r in range(4)]
        data = "[ " + " ,\n ".join(rows) + " ]"
    else:
        data = "[" + ",".join(texts) + "]"
    for binary_out in (True, False):
        r = post(fast.http, dtype, data, shape, "[%s]" % texts[1], binary_out=binary_out)
        assert r.status == 200, r
        _, out = K.decode_outputs(r)
        assert out["data_out"].dtype == ref.dtype
        scalar = reference([values[1]], dtype, ())
        if binary_out:  # bit for bit
            assert out["data_out"].tobytes() == ref.tobytes(), (out["data_out"], ref)
            assert out["scalar_out"].tobytes() == scalar.tobytes()
        else:  # JSON text: -0.0 reads back as 0 in Python
            np.testing.assert_array_equal(out["data_out"], ref)
            np.testing.assert_array_equal(out["scalar_out"], scalar)


def test_pp_ocr_cls_sized_input(fast):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 3, 48, 192)).astype(np.float32)
    for nested in (True, False):
        r = K.infer(fast.http, "id_float32", {"data": x.reshape(144, 192),
                                              "scalar": np.float32(2)}, nested=nested)
        assert r.status == 200, r
        np.testing.assert_array_equal(K.decode_outputs(r)[1]["data_out"], x.reshape(144, 192))


# (datatype, shape, data text): answered alike by both decoders.
SAME = [
    ("int8", [1, 3], "[1, 2, 128]"), ("int8", [1, 3], "[1, 2, -129]"),
    ("uint8", [1, 3], "[1, 2, -1]"), ("uint8", [1, 3], "[1, 2, 256]"),
    ("int16", [1, 3], "[1, 2, 32768]"), ("uint16", [1, 3], "[0, 65536, 1]"),
    ("int32", [1, 3], "[2147483648, 0, 0]"), ("uint32", [1, 3], "[4294967296, 0, 0]"),
    ("int64", [1, 3], "[9223372036854775808, 0, 0]"),
    ("uint64", [1, 3], "[9223372036854775807, 0, 0]"), ("uint64", [1, 3], "[-1, 0, 0]"),
    ("int32", [1, 3], "[1.0, 2, 3]"), ("int32", [1, 3], "[1e2, 2, 3]"),
    ("int32", [1, 3], "[true, 2, 3]"), ("bool", [1, 3], "[1, 0, 1]"),
    ("bool", [1, 3], "[true, false, null]"), ("float32", [1, 3], "[1, 2]"),
    ("float32", [1, 3], "[1, 2, 3, 4]"), ("float32", [1, 3], "[[1, 2], [3, 4]]"),
    ("float32", [1, 3], "[[1], [2, 3]]"), ("float32", [1, 3], "[1, 2, 3,]"),
    ("float32", [1, 3], "[1,, 3]"), ("float32", [1, 3], "[01, 2, 3]"),
    ("float32", [1, 3], "[1., 2, 3]"), ("float32", [1, 3], "[.5, 2, 3]"),
    ("float32", [1, 3], "[1e999, 2, 3]"), ("float32", [1, 3], "[-1e999, 2, 3]"),
    ("float32", [1, 3], "[NaN, 2, 3]"), ("float32", [1, 3], "[Infinity, 2, 3]"),
    ("float32", [1, 3], "[\"NaN\", \"Infinity\", \"-Infinity\"]"),
    ("float32", [1, 3], "[1 2 3]"), ("float32", [1, 3], "[1, 2, 3]]"),
    ("float32", [1, 3], "[+1, 2, 3]"), ("float32", [1, 3], "[1e, 2, 3]"),
    ("float32", [1, 3], "[-, 2, 3]"), ("float32", [1, 3], "[0x10, 2, 3]"),
    ("float32", [1, 3], "[1, 2, 3"), ("float64", [1, 3], "[99999999999999999999, 2, 3]"),
    ("float64", [1, 3], "[1e-400, -0, 0.0]"), ("float16", [1, 3], "[1e6, -1e6, 1e-9]"),
    ("float32", [0, 3], "[]"), ("float32", [1, 0], "[[]]"), ("float32", [1, 3], "[[[1]], [[2]], 3]"),
    ("float32", [2, 2], "[1, 2, 3, 4]"),
]


def status_and_body(r):
    return r.status, json.loads(r.body).get("error") if r.status != 200 else K.decode_outputs(r)[1]["data_out"].tobytes()


@pytest.mark.parametrize("dtype,shape,data", SAME)
def test_same_answer_as_classic_decoder(fast, classic, dtype, shape, data):
    a = post(fast.http, dtype, data, shape)
    b = post(classic.http, dtype, data, shape)
    assert status_and_body(a) == status_and_body(b)
    if a.status != 200:
        assert a.status == 400, a


def test_error_messages(fast):
    def err(dtype, shape, data):
        r = post(fast.http, dtype, data, shape)
        assert r.status == 400, r
        return json.loads(r.body)["error"]

    assert err("int8", [1, 3], "[1, 2, 128]") == \
        "input 'data': data element 2 (128) is out of range for INT8"
    assert err("float32", [1, 3], "[1, 2]") == \
        "input 'data': data has 2 elements; its shape needs 3"
    assert err("int32", [1, 3], "[1, 2.5, 3]") == \
        "input 'data': data element 1 is a non-integer number; expected an integer"
    assert err("float32", [1, 3], "[1, 2, 1e999]").startswith("request JSON is malformed: ")
    assert err("bool", [1, 3], "[true, 1, false]") == \
        "input 'data': data element 1 is a number; expected true or false"


def test_data_outside_inputs_and_duplicate_keys(fast, classic):
    bodies = [
        # a number array under another "data" key must still be valid JSON
        '{"inputs":[{"name":"data","datatype":"FP32","shape":[1,1],"data":[1]},'
        '{"name":"scalar","datatype":"FP32","shape":[],"data":[2]}],"parameters":{"data":[1e999]}}',
        '{"inputs":[{"name":"data","datatype":"FP32","shape":[1,1],"data":[1],"data":[2]},'
        '{"name":"scalar","datatype":"FP32","shape":[],"data":[2]}]}',
        '{"inputs":[{"name":"data","datatype":"FP32","shape":[1,1],"data":"\\u0000"},'
        '{"name":"scalar","datatype":"FP32","shape":[],"data":[2]}]}',
        '{"id":"data","inputs":[{"name":"data","datatype":"FP32","shape":[1,1],"data":[3]},'
        '{"name":"scalar","datatype":"FP32","shape":[],"data":[2]}],"parameters":{"data":[5]}}',
    ]
    for body in bodies:
        got = []
        for s in (fast, classic):
            r = K.request("POST", s.http + "/v2/models/id_float32/infer", body=body.encode(),
                          headers={"Content-Type": "application/json"})
            got.append((r.status, r.body))
        assert got[0] == got[1], (body, got)
    assert got[0][0] == 200


def mhd_threads_cpu(pid):
    """CPU seconds of each libmicrohttpd event-loop thread of process pid."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        base = "/proc/%d/task/%s/" % (pid, tid)
        if open(base + "comm").read().startswith("MHD"):
            f = open(base + "stat").read().rsplit(")", 1)[1].split()
            cpu[tid] = (int(f[11]) + int(f[12])) / tick
    return cpu


def test_connections_spread_over_http_threads(fast):
    """8 keep-alive connections opened at once, each sending JSON work: the
    connections are dealt to both event-loop threads, so both do the work."""
    x = np.random.default_rng(3).standard_normal((200, 1000)).astype(np.float32)
    body, headers = K.build_request({"data": x, "scalar": np.float32(1)})
    n, per = 8, 3
    before = mhd_threads_cpu(fast.proc.pid)
    assert len(before) == 2, before
    errors = []
    # A burst of connections, as a load generator opens them: with a thread
    # pool sharing the listening socket, one thread would accept them all.
    conns = [K.connection(fast.http, timeout=120) for _ in range(n)]
    for conn in conns:
        conn.connect()

    def worker(conn):
        try:
            for _ in range(per):
                conn.request("POST", "/v2/models/id_float32/infer", body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                assert resp.status == 200, data[:200]
            conn.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]
    after = mhd_threads_cpu(fast.proc.pid)
    used = sorted(after[t] - before[t] for t in before)
    # Round-robin: 4 connections each, the same work; allow for scheduling noise.
    assert used[0] >= 0.3 * used[1] and used[1] > 0, used
