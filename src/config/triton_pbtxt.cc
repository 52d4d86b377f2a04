// sip — a Triton config.pbtxt read with libprotobuf's text format parser
// against proto/triton_config.proto, handed on as JSON (protobuf's own JSON
// mapping, field names as written) for src/config/triton_import.c. C++ only
// here: the C side sees sip__triton_pbtxt_to_json (config/triton.h).
#include <cstdio>
#include <string>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include "triton_config.pb.h"

extern "C" {
#include "config/triton.h"
#include "core/core.h"
}

namespace {

// Collects the parser's errors and warnings as "SOURCE:LINE:COL: text"
// lines (1-based, as editors count).
class Collector : public google::protobuf::io::ErrorCollector {
 public:
  explicit Collector(const char *source) : source_(source ? source : "config.pbtxt") {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string &message) override {
    Add(&errors_, line, column, message);
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string &message) override {
    Add(&warnings_, line, column, message);
  }
  std::string errors_, warnings_;

 private:
  void Add(std::string *to, int line, int column, const std::string &message) {
    if (!to->empty()) *to += "\n";
    char at[48]; /* not std::to_string: its digit table would leave libsip as a symbol */
    snprintf(at, sizeof at, ":%d:%d: ", line + 1, column + 1);
    *to += source_ + at + message;
  }
  std::string source_;
};

char *dup(const std::string &s) {
  char *c = static_cast<char *>(sip__malloc(s.size() + 1));
  if (c) {
    s.copy(c, s.size());
    c[s.size()] = '\0';
  }
  return c;
}

}  // namespace

extern "C" sip_error_t *sip__triton_pbtxt_to_json(const char *text, size_t len, const char *source,
                                                  char **json, char **warnings) {
  *json = nullptr;
  *warnings = nullptr;
  try {
    sip::triton::ModelConfig cfg;
    Collector errs(source);
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errs);
    // A field the schema lacks is a warning naming it, not a failure: the
    // import reports it and goes on (Triton has fields sip does not).
    parser.AllowUnknownField(true);
    parser.AllowUnknownExtension(true);
    if (!parser.ParseFromString(std::string(text, len), &cfg))
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "%s; expected Triton's model configuration in protobuf text format",
                           errs.errors_.empty() ? "config.pbtxt does not parse"
                                                : errs.errors_.c_str());
    google::protobuf::util::JsonPrintOptions opts;
    opts.preserve_proto_field_names = true;
    std::string out;
    auto st = google::protobuf::util::MessageToJsonString(cfg, &out, opts);
    if (!st.ok())
      return sip_error_new(SIP_INTERNAL, "config.pbtxt: JSON conversion failed: %s",
                           std::string(st.message()).c_str());
    if (!(*json = dup(out))) return SIP__OOM();
    if (!errs.warnings_.empty() && !(*warnings = dup(errs.warnings_))) {
      sip__free(*json);
      *json = nullptr;
      return SIP__OOM();
    }
    return nullptr;
  } catch (const std::bad_alloc &) {
    sip__free(*json);
    *json = nullptr;
    return SIP__OOM();
  }
}
