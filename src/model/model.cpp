#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "core/timer.h"
#include "io/gguf.h"
#include "io/hf_checkpoint.h"
#include "io/llama2c.h"
#include "io/mapped_file.h"
#include "kernels/weight.h"
#include "model/quantized_checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace lowbit {

std::string detect_model_format(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "config.json")) return "hf";
    fail("model", "directory '" + path +
                      "' has no config.json; give a Hugging Face model directory, a .gguf "
                      "file or a llama2.c .bin file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("model", "cannot open model '" + path + "': no such file or directory");
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return "gguf";
  if (fs::path(path).filename() == "config.json") return "hf";
  if (fs::path(path).extension() == ".safetensors") return "hf";
  return "llama2c";
}

std::string find_llama2c_tokenizer(const std::string& model_path, const std::string& given) {
  if (!given.empty()) return given;
  fs::path dir = fs::path(model_path).parent_path();
  if (dir.empty()) dir = ".";
  if (fs::exists(dir / "tokenizer.bin")) return (dir / "tokenizer.bin").string();
  std::vector<fs::path> cands;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    auto n = e.path().filename().string();
    if (n.rfind("tok", 0) == 0 && e.path().extension() == ".bin" && e.path() != fs::path(model_path))
      cands.push_back(e.path());
  }
  if (cands.size() == 1) return cands[0].string();
  return "";
}

namespace {
// A dense (F32 / F16 / BF16) matrix that points into a file mapping is read from start to end at every
// decoded token, and a file mapping sits in 4 KiB pages: the stream then takes a TLB miss every 4 KiB and the
// hardware prefetchers stop at each page boundary. Where weights go to transparent huge pages
// (malloc_huge_pages: lowbit re-executes itself with glibc's tunable unless LOWBIT_HUGEPAGES=0) such a matrix
// is copied to the heap and its file pages dropped, so the resident size stays the same (one tensor more
// while it is copied). A 151936 x 896 BF16 lm_head streams at 28 GB/s from 4 KiB pages and 64 GB/s from huge
// pages on 2 Zen 5 cores (bench_kernels matmul/bf16/151936x896/T1 without and with the tunable). Returns
// whether it copied.
bool copy_mapped_dense(WeightMatrix& w, const std::vector<std::shared_ptr<io::MappedFile>>& mappings) {
  if (w.kind != WeightKind::F32 && w.kind != WeightKind::F16 && w.kind != WeightKind::BF16) return false;
  const size_t n = w.row_bytes() * static_cast<size_t>(w.rows);
  const auto it = std::find_if(mappings.begin(), mappings.end(), [&](const auto& f) {
    return n > 0 && w.data >= f->data() && w.data + n <= f->data() + f->size();
  });
  if (it == mappings.end()) return false;
  // Not zeroed first (every byte is copied), and copied by every thread in 2 MiB chunks so the file pages
  // fault in on all cores (942 MB of BF16: load 1.0-1.6 s zeroed and copied on one thread, 0.73-1.9 s so,
  // from 0.13-0.18 s mapped).
  constexpr size_t kChunk = size_t{2} << 20;
  void* raw = std::aligned_alloc(kAlign, (n + kAlign - 1) / kAlign * kAlign);
  if (!raw) return false;  // keep the mapped rows
  std::shared_ptr<uint8_t[]> copy(static_cast<uint8_t*>(raw), AlignedFree{});
  const uint8_t* src = w.data;
  parallel_for(static_cast<int64_t>((n + kChunk - 1) / kChunk), 1, [&](int64_t b0, int64_t b1) {
    const size_t lo = static_cast<size_t>(b0) * kChunk, hi = std::min(n, static_cast<size_t>(b1) * kChunk);
    std::memcpy(copy.get() + lo, src + lo, hi - lo);
  });
  (*it)->release_pages(w.data, n);
  w.data = copy.get();
  w.owner = std::move(copy);
  return true;
}
}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& o) {
  Timer timer;
  auto m = std::make_unique<Model>();
  m->path = path;
  m->format = detect_model_format(path);
  // The mappings weights may point into (a GGUF file, a checkpoint's safetensors shards), for release_pages.
  std::vector<std::shared_ptr<io::MappedFile>> mappings;
  if (m->format == "hf") {
    std::string dir = fs::is_directory(path) ? path : fs::path(path).parent_path().string();
    auto ck = std::make_shared<io::HfCheckpoint>(io::HfCheckpoint::open(dir));
    m->config = config_from_hf(ck->config);
    apply_lowbit_config_keys(ck->config, &m->config);
    // The tokenizer first, then its JSON document is released (a 150K-entry tokenizer.json parses into ~300
    // MB of DOM): otherwise it would stay resident beside the weights for the model's lifetime.
    if (!ck->tokenizer.is_null()) {
      m->tokenizer = std::make_shared<Tokenizer>(load_tokenizer_hf(ck->tokenizer, ck->tokenizer_config));
      ck->tokenizer = nullptr;
      ck->tokenizer_config = nullptr;
      release_free_heap();
    }
    for (const auto& shard : ck->shards) mappings.push_back(shard.file);
    if (is_quantized_config(ck->config))
      m->weights = load_quantized_weights(*ck, m->config, ck, o.dense);
    else
      m->weights = map_weights(m->config, ck->tensors, false, ck, o.dense, dir);
    if (!m->tokenizer) {
      // Checkpoints exported from llama2.c sources carry the original tokenizer.bin (see lowbit quantize).
      std::string tp =
          !o.tokenizer_path.empty() ? o.tokenizer_path : (fs::path(dir) / "tokenizer.bin").string();
      if (fs::exists(tp)) {
        auto td = io::Llama2cTokenizerData::open(tp, static_cast<int32_t>(m->config.vocab_size));
        m->tokenizer = std::make_shared<Tokenizer>(load_tokenizer_llama2c(td));
      }
    }
    m->keep_alive.push_back(ck);
  } else if (m->format == "gguf") {
    auto g = std::make_shared<io::GgufFile>(io::GgufFile::open(path));
    mappings.push_back(g->file);
    m->config = config_from_gguf(*g);
    m->weights = map_weights(m->config, g->tensors, true, g, o.dense, path);
    if (g->has("tokenizer.ggml.model")) m->tokenizer = std::make_shared<Tokenizer>(load_tokenizer_gguf(*g));
    m->keep_alive.push_back(g);
  } else {
    auto ck = std::make_shared<io::Llama2cCheckpoint>(io::Llama2cCheckpoint::open(path));
    m->config = config_from_llama2c(ck->header);
    m->weights = map_weights(m->config, ck->tensors, false, ck, o.dense, path);
    std::string tp = find_llama2c_tokenizer(path, o.tokenizer_path);
    if (!tp.empty()) {
      auto td = io::Llama2cTokenizerData::open(tp, static_cast<int32_t>(m->config.vocab_size));
      m->tokenizer = std::make_shared<Tokenizer>(load_tokenizer_llama2c(td));
    }
    m->keep_alive.push_back(ck);
  }
  // Every weight gets its own kernel plan now (side tables, load-time repacks; the W8A8 prefill tile is built
  // on first use). The embedding table is only read row by row: it shares lm_head's plan when tied and gets
  // no repacked copy otherwise. Once a GGUF tensor is repacked its pages in the file mapping are dropped, so
  // the stored and the repacked copy are not both resident (embedding lookups fault single rows back in).
  // Largest first: while a tensor is repacked its file pages and its pack are both resident, so the peak is
  // (packs built so far + the current tensor twice); starting with the biggest (a tied lm_head, ~1/3 of a 1B
  // model) keeps the peak near the final size instead of the final size plus that tensor (peak RSS of `lowbit
  // bench`, 1B Q3_K_M file 915 -> 718 MiB, Q4_K_M 1.00 GiB -> 826 MiB; docs/kernels.md).
  ModelWeights& W = m->weights;
  std::vector<WeightMatrix*> order;
  for (auto& [name, w] : W.named_matrices())
    if (w != &W.tok_embed) order.push_back(w);
  std::stable_sort(order.begin(), order.end(), [](const WeightMatrix* a, const WeightMatrix* b) {
    return a->row_bytes() * static_cast<size_t>(a->rows) > b->row_bytes() * static_cast<size_t>(b->rows);
  });
  const bool huge = malloc_huge_pages();
  for (WeightMatrix* w : order) {
    const uint8_t* before = w->data;
    if (huge && copy_mapped_dense(*w, mappings) && w == &W.lm_head && W.tok_embed.data == before) {
      W.tok_embed.data = w->data;  // a tied embedding reads the same rows
      W.tok_embed.owner = w->owner;
    }
    prepare_weight(*w);
    if (weight_is_repacked(*w))
      for (const auto& f : mappings) f->release_pages(w->data, w->row_bytes() * w->rows);  // no-op outside f
  }
  if (W.tied() && !W.tok_embed.plan)
    W.tok_embed.plan = W.lm_head.plan;
  else
    prepare_weight(W.tok_embed, false);
  m->load_seconds = timer.seconds();
  return m;
}

}  // namespace lowbit
