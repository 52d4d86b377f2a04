/* sip — the TorchScript backend: libtorch's C++ API behind the C vtable
 * (sip__backend_torchscript), built when libtorch is found.
 *
 * Shape of the thing:
 *  - init sets libtorch's intra-op thread count from the engine settings
 *    (0: one per core) and, once per process, its inter-op pool (0: 1).
 *  - load reads the module once (torch::jit::load on the CPU, eval mode);
 *    every sip session of the pool runs that one module. Running a
 *    TorchScript method does not mutate the module (its graph executor
 *    compiles plans under its own lock), so sessions execute concurrently
 *    without a copy of the weights each.
 *  - A TorchScript file says nothing of dtypes or shapes (a parameter is
 *    just `Tensor`), so the pool declares them: backend_options `inputs`
 *    and `outputs`, e.g. "x:float32[-1,4]; mask:bool[-1]". Input names are
 *    the forward() parameter names; outputs are forward()'s result in
 *    order (a tensor, a tuple or list of tensors) or by key (a dict).
 *  - execute runs under c10::InferenceMode (no autograd records, no
 *    version counters) on the calling thread. Request bytes reach the
 *    module without a copy (torch::from_blob); output tensors come back
 *    zero-copy inside sip buffers that hold a reference to the at::Tensor.
 *    An output that shares memory with an input is copied, since inputs
 *    are borrowed for the call only.
 */
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/script.h>

#include <atomic>
#include <cerrno>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "sip/backend.h"

namespace {

const char *const KNOWN_OPTIONS = "inputs, outputs";

/* libtorch's messages span lines and may carry a C++ backtrace; sip errors
 * travel in logfmt lines and protocol headers, so keep the first 600
 * characters with line breaks folded. */
std::string flat(const char *msg) {
  std::string s(msg ? msg : "(no message)");
  if (s.size() > 600) s = s.substr(0, 600) + "...";
  for (char &c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return s;
}

/* ---- dtypes -------------------------------------------------------------- */

bool torch_dtype(sip_dtype_t dt, c10::ScalarType *out) {
  switch (dt) {
    case SIP_DTYPE_FLOAT32: *out = c10::kFloat; return true;
    case SIP_DTYPE_FLOAT64: *out = c10::kDouble; return true;
    case SIP_DTYPE_FLOAT16: *out = c10::kHalf; return true;
    case SIP_DTYPE_UINT8: *out = c10::kByte; return true;
    case SIP_DTYPE_INT8: *out = c10::kChar; return true;
    case SIP_DTYPE_INT16: *out = c10::kShort; return true;
    case SIP_DTYPE_INT32: *out = c10::kInt; return true;
    case SIP_DTYPE_INT64: *out = c10::kLong; return true;
    case SIP_DTYPE_BOOL: *out = c10::kBool; return true;
    default: return false; /* uint16/32/64 and string have no libtorch dtype */
  }
}

/* ---- declared inputs and outputs ---------------------------------------- */

struct io_list {
  std::vector<std::string> names;
  std::vector<sip_io_desc_t> descs; /* names filled at the end (owned strings) */
};

sip_error_t *bad_spec(const char *key, const std::string &item, const char *why) {
  return sip_error_new(SIP_INVALID_ARGUMENT,
                       "torchscript: backend option %s: '%s' %s; expected items like "
                       "\"x:float32[-1,4]\" (name:dtype[dims], -1 for a dynamic dim; no "
                       "brackets for any shape) separated by ';' or ','",
                       key, item.c_str(), why);
}

/* One "name:dtype[d0,d1]" item. */
sip_error_t *parse_item(const char *key, const std::string &item, io_list *out) {
  size_t colon = item.find(':');
  if (colon == std::string::npos || colon == 0) return bad_spec(key, item, "has no name:dtype");
  std::string name = item.substr(0, colon);
  for (char c : name)
    if (!isalnum((unsigned char)c) && c != '_' && c != '.' && c != '-')
      return bad_spec(key, item, "has a name with characters other than letters, digits, _ . -");
  size_t br = item.find('[', colon);
  std::string dt = item.substr(colon + 1, br == std::string::npos ? std::string::npos : br - colon - 1);
  sip_io_desc_t d;
  memset(&d, 0, sizeof d);
  d.dtype = sip_dtype_from_name(dt.c_str());
  c10::ScalarType st;
  if (d.dtype == SIP_DTYPE_INVALID) return bad_spec(key, item, "has an unknown dtype");
  if (!torch_dtype(d.dtype, &st))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "torchscript: backend option %s: '%s': dtype %s has no libtorch "
                         "equivalent; expected one of float32, float64, float16, uint8, int8, "
                         "int16, int32, int64, bool",
                         key, item.c_str(), sip_dtype_name(d.dtype));
  d.rank = -1;
  if (br != std::string::npos) {
    if (item.back() != ']') return bad_spec(key, item, "does not end its dims with ']'");
    std::string dims = item.substr(br + 1, item.size() - br - 2);
    d.rank = 0;
    const char *p = dims.c_str();
    while (*p == ' ') p++;
    while (*p) {
      char *end;
      errno = 0;
      long long n = strtoll(p, &end, 10);
      if (end == p || errno || n < -1) return bad_spec(key, item, "has a dim that is not -1 or >= 0");
      if (d.rank == SIP_MAX_RANK) return bad_spec(key, item, "has more than 16 dims");
      d.dims[d.rank++] = n;
      p = end;
      while (*p == ' ') p++;
      if (*p == ',') p++;
      else if (*p) return bad_spec(key, item, "has dims not separated by ','");
      while (*p == ' ') p++;
    }
  }
  for (const std::string &n : out->names)
    if (n == name) return bad_spec(key, item, "repeats a name");
  out->names.push_back(name);
  out->descs.push_back(d);
  return NULL;
}

/* Items separated by ';' or by ',' outside brackets. */
sip_error_t *parse_spec(const char *key, const char *v, io_list *out) {
  std::string item;
  int depth = 0;
  for (const char *p = v;; p++) {
    char c = *p;
    if (!c || c == ';' || (c == ',' && !depth)) {
      if (!item.empty()) {
        sip_error_t *e = parse_item(key, item, out);
        if (e) return e;
      }
      item.clear();
      if (!c) break;
      continue;
    }
    if (c == '[') depth++;
    if (c == ']') depth--;
    if (c != ' ' && c != '\t' && c != '\n') item += c;
  }
  if (out->names.empty())
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "torchscript: backend option %s is empty; expected items like "
                         "\"x:float32[-1,4]\"",
                         key);
  return NULL;
}

/* ---- the model ----------------------------------------------------------- */

enum result_kind { RESULT_TENSOR, RESULT_SEQUENCE, RESULT_DICT };

struct model {
  torch::jit::Module module;
  std::string path;
  io_list in, out;
  /* forward()'s parameters (after self): their names and defaults; in_param[i]
   * is the parameter declared input i fills. */
  std::vector<std::string> params;
  std::vector<c10::optional<c10::IValue>> defaults;
  std::vector<size_t> in_param;
  result_kind result = RESULT_TENSOR;
  std::vector<sip_io_desc_t> in_descs, out_descs; /* describe()'s arrays */
  /* The loader's reference and one per session: model_free may come
   * before the last session_free. Outputs hold their at::Tensor instead,
   * which keeps whatever memory of the module they view. */
  std::atomic<long> refs{1};
};

struct session {
  model *m;
};

void free_descs(std::vector<sip_io_desc_t> &d) {
  for (sip_io_desc_t &x : d) free(x.name);
  d.clear();
}

/* Checks the declaration against forward()'s schema and fills params,
 * defaults, in_param and result. */
sip_error_t *match_schema(model *m) {
  if (!m->module.find_method("forward"))
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "torchscript: model '%s' has no forward() method", m->path.c_str());
  const c10::FunctionSchema &schema = m->module.get_method("forward").function().getSchema();
  const std::vector<c10::Argument> &args = schema.arguments();
  for (size_t i = 1; i < args.size(); i++) { /* 0 is self */
    m->params.push_back(args[i].name());
    m->defaults.push_back(args[i].default_value());
  }
  std::string params;
  for (const std::string &p : m->params) params += (params.empty() ? "" : ", ") + p;
  for (size_t i = 0; i < m->in.names.size(); i++) {
    size_t k = 0;
    while (k < m->params.size() && m->params[k] != m->in.names[i]) k++;
    if (k == m->params.size())
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "torchscript: model '%s': declared input '%s' is not a parameter of "
                           "forward(); its parameters are: %s",
                           m->path.c_str(), m->in.names[i].c_str(), params.c_str());
    const c10::TypePtr &t = args[k + 1].type();
    if (!t->isSubtypeOf(*c10::TensorType::get()))
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "torchscript: model '%s': forward() parameter '%s' has type %s; "
                           "sip passes only tensors",
                           m->path.c_str(), m->in.names[i].c_str(), t->str().c_str());
    m->in_param.push_back(k);
  }
  for (size_t k = 0; k < m->params.size(); k++) {
    bool given = false;
    for (size_t p : m->in_param) given |= p == k;
    if (!given && !m->defaults[k])
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "torchscript: model '%s': forward() parameter '%s' has no default and "
                           "is not declared in backend option inputs",
                           m->path.c_str(), m->params[k].c_str());
  }
  const std::vector<c10::Argument> &rets = schema.returns();
  c10::TypePtr rt = rets.size() == 1 ? rets[0].type() : nullptr;
  size_t n_out = m->out.names.size();
  if (rt && rt->isSubtypeOf(*c10::TensorType::get())) {
    m->result = RESULT_TENSOR;
    if (n_out != 1)
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "torchscript: model '%s': forward() returns one tensor; backend "
                           "option outputs declares %zu",
                           m->path.c_str(), n_out);
  } else if (rt && rt->kind() == c10::TypeKind::TupleType) {
    m->result = RESULT_SEQUENCE;
    size_t n = rt->containedTypes().size();
    if (n != n_out)
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "torchscript: model '%s': forward() returns a tuple of %zu; backend "
                           "option outputs declares %zu",
                           m->path.c_str(), n, n_out);
  } else if (rt && rt->kind() == c10::TypeKind::ListType) {
    m->result = RESULT_SEQUENCE; /* its length is checked per run */
  } else if (rt && rt->kind() == c10::TypeKind::DictType) {
    m->result = RESULT_DICT;
  } else {
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "torchscript: model '%s': forward() returns %s; sip takes a tensor, a "
                         "tuple or list of tensors, or a dict of str to tensor",
                         m->path.c_str(), rt ? rt->str().c_str() : "no single value");
  }
  return NULL;
}

sip_error_t *fill_descs(model *m) {
  for (int io = 0; io < 2; io++) {
    io_list &l = io ? m->out : m->in;
    std::vector<sip_io_desc_t> &d = io ? m->out_descs : m->in_descs;
    for (size_t i = 0; i < l.names.size(); i++) {
      sip_io_desc_t x = l.descs[i];
      if (!(x.name = strdup(l.names[i].c_str()))) return sip_error_new(SIP_RESOURCE_EXHAUSTED, "out of memory");
      d.push_back(x);
    }
  }
  return NULL;
}

void delete_model(model *m) {
  if (m->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  free_descs(m->in_descs);
  free_descs(m->out_descs);
  delete m;
}

/* ---- vtable ------------------------------------------------------------- */

sip_error_t *ts_init(const sip_engine_settings_t *settings, void **state) {
  *state = NULL;
  sip_engine_settings_t s = {0, 0, 0};
  if (settings) s = *settings;
  if (s.intra_op_threads < 0 || s.inter_op_threads < 0)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "torchscript: thread counts must be >= 0 (intra_op_threads=%d, "
                         "inter_op_threads=%d)",
                         s.intra_op_threads, s.inter_op_threads);
  try {
    unsigned cores = std::thread::hardware_concurrency();
    at::set_num_threads(s.intra_op_threads ? s.intra_op_threads : (int)(cores ? cores : 1));
    /* libtorch takes the inter-op size once, before its pool starts. */
    static std::once_flag interop;
    std::call_once(interop, [&] {
      try {
        at::set_num_interop_threads(s.inter_op_threads ? s.inter_op_threads : 1);
      } catch (const std::exception &) {
        /* the pool was started by an earlier user of libtorch: keep its size */
      }
    });
  } catch (const std::exception &e) {
    return sip_error_new(SIP_INTERNAL, "torchscript: cannot set the thread counts: %s",
                         flat(e.what()).c_str());
  }
  return NULL;
}

void ts_shutdown(void *state) { (void)state; }

sip_error_t *ts_load(void *state, const char *path, const sip_kv_t *options, size_t n_options,
                     void **out) {
  (void)state;
  *out = NULL;
  if (!path || !*path)
    return sip_error_new(SIP_INVALID_ARGUMENT, "torchscript: a model_path is required");
  model *m = new (std::nothrow) model();
  if (!m) return sip_error_new(SIP_RESOURCE_EXHAUSTED, "out of memory");
  m->path = path;
  sip_error_t *e = NULL;
  for (size_t i = 0; i < n_options && !e; i++) {
    const char *k = options[i].key, *v = options[i].value;
    if (!k || !v)
      e = sip_error_new(SIP_INVALID_ARGUMENT, "torchscript: backend option %zu has no %s", i,
                        k ? "value" : "name");
    else if (!strcmp(k, "inputs"))
      e = parse_spec(k, v, &m->in);
    else if (!strcmp(k, "outputs"))
      e = parse_spec(k, v, &m->out);
    else
      e = sip_error_new(SIP_INVALID_ARGUMENT,
                        "torchscript: unknown backend option '%s' (known: %s)", k, KNOWN_OPTIONS);
  }
  if (!e && (m->in.names.empty() || m->out.names.empty()))
    e = sip_error_new(SIP_INVALID_ARGUMENT,
                      "torchscript: model '%s': backend_options must declare %s (a TorchScript "
                      "file does not record dtypes or shapes), e.g. inputs: \"x:float32[-1,4]\", "
                      "outputs: \"y:float32[-1,4]\"",
                      path, m->in.names.empty() ? "inputs" : "outputs");
  FILE *f = e ? NULL : fopen(path, "rb");
  if (!e && !f) {
    int err = errno;
    e = sip_error_new(err == ENOENT || err == ENOTDIR ? SIP_NOT_FOUND
                      : err == EACCES                 ? SIP_PERMISSION_DENIED
                                                      : SIP_FAILED_PRECONDITION,
                      "torchscript: cannot open model '%s': %s", path, strerror(err));
  }
  if (f) fclose(f);
  if (!e) {
    try {
      m->module = torch::jit::load(path, c10::Device(c10::kCPU));
      m->module.eval();
      e = match_schema(m);
    } catch (const c10::Error &x) {
      e = sip_error_new(SIP_FAILED_PRECONDITION,
                        "torchscript: cannot load model '%s' (expected a TorchScript file saved "
                        "by torch.jit.save): %s",
                        path, flat(x.what_without_backtrace()).c_str());
    } catch (const std::exception &x) {
      e = sip_error_new(SIP_FAILED_PRECONDITION, "torchscript: cannot load model '%s': %s", path,
                        flat(x.what()).c_str());
    }
  }
  if (!e) e = fill_descs(m);
  if (e) {
    delete_model(m);
    return e;
  }
  *out = m;
  return NULL;
}

void ts_describe(void *mp, const sip_io_desc_t **inputs, size_t *n_inputs,
                 const sip_io_desc_t **outputs, size_t *n_outputs) {
  model *m = static_cast<model *>(mp);
  *inputs = m->in_descs.data();
  *n_inputs = m->in_descs.size();
  *outputs = m->out_descs.data();
  *n_outputs = m->out_descs.size();
}

sip_error_t *ts_session_new(void *mp, void **out) {
  model *m = static_cast<model *>(mp);
  session *s = new (std::nothrow) session{m};
  *out = s;
  if (!s) return sip_error_new(SIP_RESOURCE_EXHAUSTED, "out of memory");
  m->refs.fetch_add(1, std::memory_order_relaxed);
  return NULL;
}

void ts_session_free(void *sp) {
  session *s = static_cast<session *>(sp);
  if (!s) return;
  delete_model(s->m);
  delete s;
}

void ts_model_free(void *m) {
  if (m) delete_model(static_cast<model *>(m));
}


/* ---- execute ------------------------------------------------------------- */

/* A valid pointer for 0-byte tensors. Never written. */
int64_t empty_data[1];

void release_tensor(void *ctx) { delete static_cast<at::Tensor *>(ctx); }

/* True when [p, p+n) overlaps one of the request's borrowed input buffers. */
bool overlaps_inputs(const void *p, size_t n, const sip_tensor_t *const *inputs, size_t n_in) {
  uintptr_t a = (uintptr_t)p;
  for (size_t i = 0; i < n_in; i++) {
    uintptr_t lo = (uintptr_t)inputs[i]->data;
    if (inputs[i]->nbytes && a < lo + inputs[i]->nbytes && lo < a + n) return true;
  }
  return false;
}

/* The message of a failure inside forward(). TorchScript prefixes the
 * cause with a traceback of the script; the cause is its last line. */
std::string run_message(const char *what) {
  std::string s(what ? what : "");
  if (s.find("Traceback of TorchScript") != std::string::npos) {
    size_t end = s.find_last_not_of("\n ");
    size_t start = end == std::string::npos ? 0 : s.rfind('\n', end);
    s = s.substr(start == std::string::npos ? 0 : start + 1,
                 end == std::string::npos ? std::string::npos : end - start);
  }
  return flat(s.c_str());
}

sip_error_t *make_input(const model *m, const sip_tensor_t *t, size_t index, size_t *decl,
                        at::Tensor *out) {
  const char *name = t->name;
  size_t i = 0;
  if (name) {
    while (i < m->in.names.size() && m->in.names[i] != name) i++;
  } else {
    i = index;
  }
  if (i >= m->in.names.size())
    return sip_error_new(SIP_INVALID_ARGUMENT, "torchscript: the model has no input '%s'",
                         name ? name : "(unnamed)");
  name = m->in.names[i].c_str();
  c10::ScalarType st;
  if (!torch_dtype(t->dtype, &st))
    return sip_error_new(SIP_INVALID_ARGUMENT, "torchscript: input '%s' has dtype %s, which "
                         "libtorch does not take", name, sip_dtype_name(t->dtype));
  int64_t count = sip_tensor_count(t);
  size_t es = sip_dtype_size(t->dtype);
  if (t->rank < 0 || t->rank > SIP_MAX_RANK || count < 0 || (uint64_t)count > SIZE_MAX / es ||
      (size_t)count * es != t->nbytes || (t->nbytes && !t->data))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "torchscript: input '%s' has %zu bytes of data; its shape and dtype need "
                         "%llu",
                         name, t->nbytes, (unsigned long long)(count < 0 ? 0 : count) * es);
  /* Zero-copy: the module reads the request's bytes in place. */
  void *data = t->nbytes ? const_cast<void *>(t->data) : static_cast<void *>(empty_data);
  *out = at::from_blob(data, at::IntArrayRef(t->dims, (size_t)t->rank),
                       at::TensorOptions().dtype(st).device(c10::kCPU));
  *decl = i;
  return NULL;
}

/* Output `name` (declared output o) as a sip tensor. */
sip_error_t *make_output(const model *m, size_t o, at::Tensor t, const sip_tensor_t *const *inputs,
                         size_t n_inputs, sip_tensor_t **out) {
  const sip_io_desc_t &d = m->out.descs[o];
  const char *name = m->out.names[o].c_str();
  c10::ScalarType want;
  torch_dtype(d.dtype, &want);
  if (!t.defined() || !t.device().is_cpu())
    return sip_error_new(SIP_FAILED_PRECONDITION, "torchscript: output '%s' is %s; expected a "
                         "CPU tensor", name, t.defined() ? "on another device" : "undefined");
  if (t.scalar_type() != want)
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "torchscript: output '%s' is %s; backend option outputs declares %s",
                         name, c10::toString(t.scalar_type()), sip_dtype_name(d.dtype));
  int rank = (int)t.dim();
  bool shape_ok = rank <= SIP_MAX_RANK && (d.rank < 0 || d.rank == rank);
  for (int k = 0; shape_ok && d.rank >= 0 && k < rank; k++)
    shape_ok = d.dims[k] < 0 || d.dims[k] == t.size(k);
  if (!shape_ok)
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "torchscript: output '%s' has shape %s; backend option outputs declares "
                         "rank %d (dims of -1 are free)",
                         name, c10::str(t.sizes()).c_str(), d.rank);
  if (!t.is_contiguous()) t = t.contiguous();
  int64_t dims[SIP_MAX_RANK];
  for (int k = 0; k < rank; k++) dims[k] = t.size(k);
  size_t nbytes = (size_t)t.numel() * t.element_size();
  const void *data = t.data_ptr();
  if (!nbytes) {
    *out = sip_tensor_new_view(name, d.dtype, rank, dims, empty_data, 0, NULL);
  } else if (overlaps_inputs(data, nbytes, inputs, n_inputs)) {
    /* An input handed back (identity, a view): it must outlive the request. */
    *out = sip_tensor_new_copy(name, d.dtype, rank, dims, data, nbytes);
  } else {
    at::Tensor *keep = new (std::nothrow) at::Tensor(std::move(t));
    if (!keep) return sip_error_new(SIP_RESOURCE_EXHAUSTED, "out of memory");
    sip_buf_t *buf = sip_buf_wrap(const_cast<void *>(data), nbytes, release_tensor, keep);
    if (!buf) return sip_error_new(SIP_RESOURCE_EXHAUSTED, "out of memory");
    *out = sip_tensor_new_view(name, d.dtype, rank, dims, data, nbytes, buf);
    sip_buf_unref(buf);
  }
  return *out ? NULL : sip_error_new(SIP_RESOURCE_EXHAUSTED, "out of memory");
}

/* forward()'s result, element o of it as declared. */
sip_error_t *pick(const model *m, const c10::IValue &r, size_t o, at::Tensor *t) {
  const char *name = m->out.names[o].c_str();
  if (m->result == RESULT_TENSOR) {
    if (r.isTensor()) return *t = r.toTensor(), nullptr;
  } else if (m->result == RESULT_SEQUENCE) {
    if (r.isTuple() || r.isList()) {
      std::vector<c10::IValue> v = r.isTuple() ? r.toTupleRef().elements().vec() : r.toListRef().vec();
      if (v.size() != m->out.names.size())
        return sip_error_new(SIP_FAILED_PRECONDITION,
                             "torchscript: forward() returned %zu values; backend option outputs "
                             "declares %zu",
                             v.size(), m->out.names.size());
      if (v[o].isTensor()) return *t = v[o].toTensor(), nullptr;
    }
  } else if (r.isGenericDict()) {
    c10::Dict<c10::IValue, c10::IValue> dict = r.toGenericDict();
    auto it = dict.find(c10::IValue(m->out.names[o]));
    if (it == dict.end())
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "torchscript: forward() returned a dict without key '%s'", name);
    if (it->value().isTensor()) return *t = it->value().toTensor(), nullptr;
  }
  return sip_error_new(SIP_FAILED_PRECONDITION, "torchscript: output '%s': forward() returned "
                       "%s where a tensor was expected", name, r.tagKind().c_str());
}

sip_error_t *run(session *s, const sip_tensor_t *const *inputs, size_t n_inputs,
                 const char *const *out_names, size_t n_outputs, sip_tensor_t **outputs) {
  model *m = s->m;
  /* No autograd for anything made here, on this thread, for this call. */
  c10::InferenceMode guard;
  std::vector<c10::IValue> args(m->params.size());
  for (size_t k = 0; k < m->params.size(); k++)
    if (m->defaults[k]) args[k] = *m->defaults[k];
  for (size_t i = 0; i < n_inputs; i++) {
    at::Tensor x;
    size_t decl = 0;
    sip_error_t *e = make_input(m, inputs[i], i, &decl, &x);
    if (e) return e;
    args[m->in_param[decl]] = std::move(x);
  }
  c10::IValue r;
  try {
    r = m->module.forward(std::move(args));
  } catch (const std::bad_alloc &) {
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "torchscript: out of memory running the model");
  } catch (const c10::Error &x) {
    return sip_error_new(SIP_INVALID_ARGUMENT, "torchscript: run failed: %s",
                         run_message(x.what_without_backtrace()).c_str());
  } catch (const std::exception &x) {
    /* torch::jit::JITException (a `raise` in the script) and the like */
    return sip_error_new(SIP_INVALID_ARGUMENT, "torchscript: run failed: %s",
                         run_message(x.what()).c_str());
  }
  sip_error_t *e = NULL;
  size_t done = 0;
  for (; done < n_outputs && !e; done++) {
    size_t o = 0;
    while (o < m->out.names.size() && m->out.names[o] != out_names[done]) o++;
    at::Tensor t;
    if (o == m->out.names.size())
      e = sip_error_new(SIP_INVALID_ARGUMENT, "torchscript: the model has no output '%s'",
                        out_names[done]);
    if (!e) e = pick(m, r, o, &t);
    if (!e) e = make_output(m, o, std::move(t), inputs, n_inputs, &outputs[done]);
  }
  if (e)
    for (size_t j = 0; j < n_outputs; j++) {
      sip_tensor_free(outputs[j]);
      outputs[j] = NULL;
    }
  return e;
}

sip_error_t *ts_execute(void *sp, const sip_tensor_t *const *inputs, size_t n_inputs,
                        const char *const *out_names, size_t n_outputs, sip_tensor_t **outputs) {
  for (size_t j = 0; j < n_outputs; j++) outputs[j] = NULL;
  try {
    return run(static_cast<session *>(sp), inputs, n_inputs, out_names, n_outputs, outputs);
  } catch (const std::bad_alloc &) {
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "torchscript: out of memory");
  } catch (const std::exception &x) {
    return sip_error_new(SIP_INTERNAL, "torchscript: %s", flat(x.what()).c_str());
  }
}

/* ---- formats ------------------------------------------------------------ */

/* A model_path ending in .pt (or .pts) that is a zip archive, the container
 * torch.jit.save writes. */
int ts_probe(const char *path) {
  size_t n = path ? strlen(path) : 0;
  bool ext = (n > 3 && !strcmp(path + n - 3, ".pt")) || (n > 4 && !strcmp(path + n - 4, ".pts"));
  if (!ext) return 0;
  FILE *f = fopen(path, "rb");
  unsigned char magic[4] = {0, 0, 0, 0};
  size_t got = f ? fread(magic, 1, sizeof magic, f) : 0;
  if (f) fclose(f);
  return got == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

const char *const DEFAULT_FILES[] = {"model.pt", NULL};

const sip_backend_option_t OPTIONS[] = {
    {"inputs", SIP_OPTION_STRING, NULL,
     "Required: forward()'s tensor parameters as name:dtype[dims] items separated by ';' "
     "(\"x:float32[-1,4]; mask:bool[-1]\", -1 a dynamic dim, no brackets any shape), since a "
     "TorchScript file records no dtypes or shapes.",
     NULL, 0, 0},
    {"outputs", SIP_OPTION_STRING, NULL,
     "Required: forward()'s results in order (a tensor, or a tuple or list of tensors) or by key "
     "(a dict), as name:dtype[dims] items like inputs.",
     NULL, 0, 0},
};

sip_backend_vtable_t make_vtable() {
  sip_backend_vtable_t vt;
  memset(&vt, 0, sizeof vt);
  vt.name = "torchscript";
  vt.flags = SIP_BACKEND_NEEDS_FILE;
  vt.platform = "pytorch_libtorch";
  vt.init = ts_init;
  vt.shutdown = ts_shutdown;
  vt.load = ts_load;
  vt.describe = ts_describe;
  vt.session_new = ts_session_new;
  vt.execute = ts_execute;
  vt.session_free = ts_session_free;
  vt.model_free = ts_model_free;
  vt.probe = ts_probe;
  vt.default_files = DEFAULT_FILES;
  vt.options = OPTIONS;
  vt.n_options = sizeof OPTIONS / sizeof OPTIONS[0];
  return vt;
}

}  // namespace

extern "C" const sip_backend_vtable_t sip__backend_torchscript = make_vtable();
