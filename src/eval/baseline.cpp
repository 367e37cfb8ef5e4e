#include "eval/baseline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"
#include "core/json_text.h"
#include "core/version.h"
#include "io/mapped_file.h"

namespace lowbit::eval {

namespace {

constexpr char kMagic[8] = {'L', 'B', 'B', 'A', 'S', 'E', '0', '1'};
constexpr char kEndMagic[8] = {'L', 'B', 'E', 'N', 'D', 0, 0, 0};
constexpr uint32_t kMaxHeader = 1u << 20;
constexpr size_t kRecordFixed = 56;

size_t record_bytes(int k) {
  return kRecordFixed + 12 * static_cast<size_t>(k);
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Header integers. nlohmann's get<int>() casts whatever number it finds (a float out of range is undefined
// behaviour, a big integer wraps), so the value must be a JSON integer that fits T.
template <typename T>
T int_value(const nlohmann::json& v, const std::string& what) {
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                        : v.is_number_integer() && v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                              v.get<int64_t>() <= std::numeric_limits<T>::max();
  if (!fits) {
    throw Error("eval", "baseline header field '" + what + "' must be an integer in range, got " +
                            v.dump().substr(0, 40));
  }
  return v.get<T>();
}

template <typename T>
T int_field(const nlohmann::json& j, const char* key) {
  return int_value<T>(j.at(key), key);
}

std::string hex_to_raw(const std::string& hex) {
  std::string raw(hex.size() / 2, '\0');
  for (size_t i = 0; i < raw.size(); ++i)
    raw[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return raw;
}

nlohmann::json ppl_json(const Perplexity& p) {
  return {{"ppl", p.ppl},
          {"ppl_stderr", p.ppl_stderr},
          {"mean_nll", p.mean_nll},
          {"mean_nll_stderr", p.mean_nll_stderr},
          {"tokens", p.tokens}};
}

}  // namespace

nlohmann::json BaselineMeta::to_json() const {
  return {{"format", "lowbit-eval-baseline"},
          {"format_version", kBaselineVersion},
          {"tool", tool},
          {"model",
           {{"path", model_path},
            {"format", model_format},
            {"sha256", model_sha256},
            {"dtype", dtype},
            {"kv_cache", kv_cache},
            {"variant", variant}}},
          {"text",
           {{"path", text_path},
            {"sha256", text_sha256},
            {"tokens_sha256", tokens_sha256},
            {"text_tokens", text_tokens}}},
          {"method", ppl_method_name(method)},
          {"ctx", ctx},
          {"windows", windows},
          {"first_chars", first_chars},
          {"bos", bos},
          {"vocab_size", vocab_size},
          {"topk", k},
          {"rows", rows},
          {"perplexity", ppl_json(ppl)},
          {"histograms", histograms.to_json()}};
}

BaselineMeta BaselineMeta::from_json(const nlohmann::json& j) {
  BaselineMeta m;
  try {
    if (j.at("format").get<std::string>() != "lowbit-eval-baseline")
      throw Error("eval", "header 'format' is not lowbit-eval-baseline");
    m.tool = j.at("tool").get<std::string>();
    const auto& mo = j.at("model");
    m.model_path = mo.at("path").get<std::string>();
    m.model_format = mo.at("format").get<std::string>();
    m.model_sha256 = mo.at("sha256").get<std::string>();
    m.dtype = mo.at("dtype").get<std::string>();
    m.kv_cache = mo.at("kv_cache").get<std::string>();
    m.variant = mo.value("variant", "");
    const auto& t = j.at("text");
    m.text_path = t.at("path").get<std::string>();
    m.text_sha256 = t.at("sha256").get<std::string>();
    m.tokens_sha256 = t.at("tokens_sha256").get<std::string>();
    m.text_tokens = int_field<int64_t>(t, "text_tokens");
    m.method = ppl_method_from_string(j.at("method").get<std::string>());
    m.ctx = int_field<int64_t>(j, "ctx");
    m.windows = int_field<int64_t>(j, "windows");
    m.first_chars = int_field<int64_t>(j, "first_chars");
    m.bos = j.at("bos").get<bool>();
    m.vocab_size = int_field<int64_t>(j, "vocab_size");
    m.k = int_field<int>(j, "topk");
    m.rows = int_field<int64_t>(j, "rows");
    const auto& p = j.at("perplexity");
    m.ppl.ppl = p.at("ppl").get<double>();
    m.ppl.ppl_stderr = p.at("ppl_stderr").get<double>();
    m.ppl.mean_nll = p.at("mean_nll").get<double>();
    m.ppl.mean_nll_stderr = p.at("mean_nll_stderr").get<double>();
    m.ppl.tokens = int_field<int64_t>(p, "tokens");
    for (const char* h : {"top1_prob", "entropy"}) {
      const nlohmann::json& counts = j.at("histograms").at(h).at("counts");
      if (!counts.is_array()) continue;  // Histogram::from_json names the type error
      for (const auto& c : counts) (void)int_value<int64_t>(c, std::string("histograms.") + h + ".counts");
    }
    m.histograms.top1_prob = Histogram::from_json(j.at("histograms").at("top1_prob"));
    m.histograms.entropy = Histogram::from_json(j.at("histograms").at("entropy"));
  } catch (const nlohmann::json::exception& e) {
    throw Error("eval",
                std::string("baseline header is missing a field or has a wrong type (") + e.what() + ")");
  } catch (const UsageError& e) {
    throw Error("eval", std::string("baseline header has a bad value: ") + e.what());
  }
  if (m.ctx < 2 || m.ctx > (int64_t{1} << 24) || m.windows > (int64_t{1} << 31) || m.vocab_size < 1 ||
      m.vocab_size > (int64_t{1} << 31) || m.k < 1 || m.k > kBaselineMaxK || m.k > m.vocab_size ||
      m.rows < 1 || m.windows < 1 || m.rows > m.windows * m.ctx)
    throw Error("eval", "baseline header has inconsistent sizes (ctx " + std::to_string(m.ctx) + ", vocab " +
                            std::to_string(m.vocab_size) + ", topk " + std::to_string(m.k) + ", rows " +
                            std::to_string(m.rows) + ", windows " + std::to_string(m.windows) + ")");
  return m;
}

std::string model_sha256(const Model& m) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(m.path, ec)) return sha256_file_hex(m.path);
  if (fs::is_directory(m.path, ec)) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(m.path, ec))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw Error("eval", "no *.safetensors file to hash in '" + m.path + "'");
    std::string list;
    for (const auto& f : files) list += fs::path(f).filename().string() + " " + sha256_file_hex(f) + "\n";
    return sha256_hex(list);
  }
  throw Error("eval", "cannot hash the model at '" + m.path + "': not a file or directory");
}

BaselineMeta make_baseline_meta(const Model& m, const EvalText& t, const ScoreTable& table) {
  BaselineMeta b;
  b.model_path = m.path;
  b.model_format = m.format;
  b.text_path = t.path;
  b.text_sha256 = t.text_sha256;
  b.tokens_sha256 = t.tokens_sha256;
  b.text_tokens = t.text_tokens;
  b.method = t.method;
  b.ctx = t.ctx;
  b.windows = static_cast<int64_t>(t.chunks.size());
  b.first_chars = t.first_chars;
  b.bos = t.bos;
  b.vocab_size = m.config.vocab_size;
  b.rows = table.size();
  b.k = table.k;
  b.tool = "lowbit " + version() + " (commit " + git_commit() + ")";
  b.ppl = table_perplexity(table);
  b.histograms = score_histograms(table, m.config.vocab_size);
  return b;
}

void save_baseline(const std::string& path, const Baseline& b) {
  const ScoreTable& t = b.table;
  if (t.k < 1 || t.k > kBaselineMaxK)
    throw Error("eval", "baseline top-k " + std::to_string(t.k) + " is out of range [1, " +
                            std::to_string(kBaselineMaxK) + "]");
  if (b.meta.rows != t.size() || b.meta.k != t.k)
    throw Error("eval", "baseline meta does not describe its table (internal error)");
  const std::string header = json_text(b.meta.to_json());
  if (header.size() > kMaxHeader) throw Error("eval", "baseline header exceeds 1 MiB (internal error)");
  std::string out;
  const size_t rb = record_bytes(t.k);
  out.reserve(16 + header.size() + 16 + rb * t.rows.size() + 40);
  out.append(kMagic, 8);
  put<uint32_t>(out, kBaselineVersion);
  put<uint32_t>(out, static_cast<uint32_t>(header.size()));
  out += header;
  put<uint64_t>(out, static_cast<uint64_t>(t.rows.size()));
  put<uint32_t>(out, static_cast<uint32_t>(t.k));
  put<uint32_t>(out, static_cast<uint32_t>(rb));
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const TokenScore& r = t.rows[i];
    put<int32_t>(out, r.target);
    put<int32_t>(out, r.pos);
    put<int32_t>(out, r.chunk);
    put<int32_t>(out, r.top1);
    put<double>(out, r.lse);
    put<double>(out, r.tail);
    put<double>(out, r.logprob);
    put<double>(out, r.top1_logprob);
    put<float>(out, r.entropy);
    put<float>(out, 0.0f);
    out.append(reinterpret_cast<const char*>(t.top_ids.data() + i * t.k), 4 * static_cast<size_t>(t.k));
    out.append(reinterpret_cast<const char*>(t.top_lp.data() + i * t.k), 8 * static_cast<size_t>(t.k));
  }
  out += hex_to_raw(sha256_hex(out));
  out.append(kEndMagic, 8);
  io::write_file_atomic(path, out.data(), out.size());  // never leaves a half-written baseline behind
}

Baseline load_baseline(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw Error("eval",
                "cannot open baseline '" + path + "'; create one with lowbit eval ppl --save-baseline");
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse_baseline(reinterpret_cast<const uint8_t*>(data.data()), data.size(), path);
}

Baseline parse_baseline(const uint8_t* p, size_t n, const std::string& name) {
  auto bad = [&](const std::string& what) -> Error {
    return Error("eval",
                 "baseline '" + name + "' " + what + "; re-create it with lowbit eval ppl --save-baseline");
  };
  if (n < 16) {
    if (n >= 1 && std::memcmp(p, kMagic, std::min<size_t>(n, 8)) != 0)
      throw bad("is not a lowbit baseline file");
    throw bad("is truncated (" + std::to_string(n) + " bytes)");
  }
  if (std::memcmp(p, kMagic, 8) != 0) throw bad("is not a lowbit baseline file (bad magic)");
  const uint32_t version = get<uint32_t>(p + 8);
  if (version != kBaselineVersion)
    throw bad("has format version " + std::to_string(version) + ", this lowbit reads version " +
              std::to_string(kBaselineVersion));
  const uint32_t hl = get<uint32_t>(p + 12);
  if (hl > kMaxHeader) throw bad("is corrupt: header length " + std::to_string(hl) + " exceeds 1 MiB");
  if (n < 16 + static_cast<size_t>(hl) + 16) throw bad("is truncated inside its header");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(p + 16, p + 16 + hl);
  } catch (const nlohmann::json::exception&) {
    throw bad("is corrupt: its header is not valid JSON");
  }
  Baseline b;
  try {
    b.meta = BaselineMeta::from_json(j);
  } catch (const Error& e) {
    throw bad(std::string("is corrupt: ") + e.what());
  }
  const uint8_t* q = p + 16 + hl;
  const uint64_t rows = get<uint64_t>(q);
  const uint32_t k = get<uint32_t>(q + 8), rb = get<uint32_t>(q + 12);
  if (rows != static_cast<uint64_t>(b.meta.rows) || k != static_cast<uint32_t>(b.meta.k) ||
      rb != record_bytes(b.meta.k))
    throw bad("is corrupt: the record table (rows " + std::to_string(rows) + ", k " + std::to_string(k) +
              ", record " + std::to_string(rb) + " bytes) disagrees with the header");
  const size_t table_off = 16 + hl + 16;
  uint64_t expected = 0;
  if (__builtin_mul_overflow(rows, static_cast<uint64_t>(rb), &expected) ||
      __builtin_add_overflow(expected, static_cast<uint64_t>(table_off + 40), &expected))
    throw bad("is corrupt: its row count " + std::to_string(rows) + " is impossibly large");
  if (n < expected)
    throw bad("is truncated: expected " + std::to_string(expected) + " bytes, the file has " +
              std::to_string(n));
  if (n > expected)
    throw bad("has " + std::to_string(n - expected) + " unexpected trailing bytes (expected " +
              std::to_string(expected) + ")");
  if (std::memcmp(p + n - 8, kEndMagic, 8) != 0) throw bad("is corrupt: bad end marker");
  const std::string sum = hex_to_raw(sha256_hex(p, n - 40));
  if (std::memcmp(sum.data(), p + n - 40, 32) != 0) throw bad("is corrupt: checksum mismatch");

  ScoreTable& t = b.table;
  t.k = static_cast<int>(k);
  t.rows.resize(rows);
  t.top_ids.resize(rows * k);
  t.top_lp.resize(rows * k);
  const int64_t V = b.meta.vocab_size;
  for (uint64_t i = 0; i < rows; ++i) {
    const uint8_t* r = p + table_off + i * rb;
    TokenScore& s = t.rows[i];
    s.target = get<int32_t>(r);
    s.pos = get<int32_t>(r + 4);
    s.chunk = get<int32_t>(r + 8);
    s.top1 = get<int32_t>(r + 12);
    s.lse = get<double>(r + 16);
    s.tail = get<double>(r + 24);
    s.logprob = get<double>(r + 32);
    s.top1_logprob = get<double>(r + 40);
    s.entropy = get<float>(r + 48);
    std::memcpy(t.top_ids.data() + i * k, r + kRecordFixed, 4 * static_cast<size_t>(k));
    std::memcpy(t.top_lp.data() + i * k, r + kRecordFixed + 4 * k, 8 * static_cast<size_t>(k));
    bool ok = s.target >= 0 && s.target < V && s.top1 >= 0 && s.top1 < V && s.pos >= 1 &&
              s.pos < b.meta.ctx && s.chunk >= 0 && s.chunk < b.meta.windows && std::isfinite(s.lse) &&
              s.tail >= 0 && s.tail <= 1 && s.logprob <= 0 && std::isfinite(s.logprob) &&
              s.top1_logprob <= 0 && std::isfinite(s.entropy);
    for (uint32_t c = 0; ok && c < k; ++c) {
      int32_t id = t.top_ids[i * k + c];
      double lp = t.top_lp[i * k + c];
      ok = id >= 0 && id < V && lp <= 0 && !std::isnan(lp);
    }
    if (!ok) throw bad("is corrupt: record " + std::to_string(i) + " has out-of-range values");
  }
  return b;
}

void check_baseline_matches(const BaselineMeta& b, const EvalText& t, int64_t vocab_size) {
  std::vector<std::string> diffs;
  if (b.text_sha256 != t.text_sha256)
    diffs.push_back("text differs (baseline: '" + b.text_path + "' sha256 " + b.text_sha256.substr(0, 12) +
                    "…, now: '" + t.path + "' sha256 " + t.text_sha256.substr(0, 12) + "…)");
  if (b.method != t.method)
    diffs.push_back(std::string("method differs (baseline ") + ppl_method_name(b.method) + ", now " +
                    ppl_method_name(t.method) + ")");
  if (b.ctx != t.ctx)
    diffs.push_back("ctx differs (baseline " + std::to_string(b.ctx) + ", now " + std::to_string(t.ctx) +
                    ")");
  if (b.windows != static_cast<int64_t>(t.chunks.size()))
    diffs.push_back("number of windows differs (baseline " + std::to_string(b.windows) + ", now " +
                    std::to_string(t.chunks.size()) + "; --chunks)");
  if (b.method == PplMethod::FirstWindow && b.first_chars != t.first_chars)
    diffs.push_back("first-chars differs (baseline " + std::to_string(b.first_chars) + ", now " +
                    std::to_string(t.first_chars) + ")");
  if (b.vocab_size != vocab_size)
    diffs.push_back("vocabulary differs (baseline " + std::to_string(b.vocab_size) + " tokens, now " +
                    std::to_string(vocab_size) + "): another model family");
  if (diffs.empty() && b.tokens_sha256 != t.tokens_sha256)
    diffs.push_back(
        "the text tokenizes differently (token-id sha256 mismatch): another tokenizer or BOS setting");
  if (diffs.empty()) return;
  std::string msg =
      "baseline made by " + b.tool + " on model '" + b.model_path + "' does not match this run: ";
  for (size_t i = 0; i < diffs.size(); ++i) msg += (i ? "; " : "") + diffs[i];
  msg += ". Use the same --text/--ctx/--method/--chunks as the baseline, or re-create it";
  throw Error("eval", msg);
}

}  // namespace lowbit::eval
