// KvCache picks its store from the spec; kv_footprint sizes either store without allocating it.
#include "kv/kv_cache.h"

#include "kv/kv_paged.h"

namespace lowbit {

namespace {
KvDtype plain_dtype(KvFormat f) {
  return f == KvFormat::F16 ? KvDtype::F16 : f == KvFormat::BF16 ? KvDtype::BF16 : KvDtype::F32;
}
}  // namespace

KvCache::KvCache(const ModelConfig& c, int n_seqs, int64_t capacity, KvDtype dtype)
    : store_(std::make_shared<ContiguousKvStore>(c, n_seqs, capacity, dtype)), dtype_(dtype) {}

KvCache::KvCache(const ModelConfig& c, int n_seqs, int64_t capacity, const KvCacheSpec& spec)
    : dtype_(plain_dtype(spec.k.format)) {
  if (spec.is_plain()) {
    store_ = std::make_shared<ContiguousKvStore>(c, n_seqs, capacity, dtype_);
    return;
  }
  auto p = std::make_shared<PagedKvCache>(c, n_seqs, capacity, spec);
  paged_ = p.get();
  store_ = std::move(p);
}

int64_t KvFootprint::bytes(int64_t n_seqs, int64_t capacity) const {
  return n_seqs * ((capacity + block_tokens - 1) / block_tokens) * block_bytes + n_seqs * staging_per_seq;
}

KvFootprint kv_footprint(const ModelConfig& c, const KvCacheSpec& spec) {
  KvFootprint f;
  if (spec.is_plain()) {
    f.block_bytes = ContiguousKvStore::token_bytes(c, plain_dtype(spec.k.format));
    return f;
  }
  const PagedKvCache p(c, 1, 1, spec, /*allocate=*/false);
  f.paged = true;
  f.block_tokens = p.block_tokens();
  f.block_bytes = p.block_bytes();
  f.staging_per_seq = p.staging_bytes();
  return f;
}

}  // namespace lowbit
