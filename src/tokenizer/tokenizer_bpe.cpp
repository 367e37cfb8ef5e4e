// The merge loops. Both keep the symbols of a word in a doubly linked list and the candidate pairs in a
// priority queue, so a word of n characters costs O(n log n) instead of llama2.c's O(n^2) rescans. Stale
// queue entries (a side was merged since the pair was queued) are detected by the recorded symbol lengths and
// skipped.
//
//  ScoreMerge (llama2.c encode, llama.cpp llm_tokenizer_spm): a pair is a candidate when the concatenated
//  text is
//    a vocabulary piece; the candidate whose piece has the highest score merges first, leftmost on ties.
//    Symbols are spans of text; a character that is not a piece ends up as its byte-fallback tokens <0xXX>
//    (or unk).
//  RankMerge / ByteLevel (Hugging Face BPE, llama.cpp llm_tokenizer_bpe): symbols are token ids; a pair is a
//    candidate when the merges list has it; the lowest rank merges first, leftmost on ties.
#include <queue>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace lowbit {

namespace {

struct RankPair {
  int32_t rank;
  int32_t left, right;
  uint32_t left_len, right_len;
  int32_t id;
};

struct RankPairWorse {
  bool operator()(const RankPair& a, const RankPair& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
};

template <typename Sym>
void link(std::vector<Sym>& syms) {
  const int32_t n = static_cast<int32_t>(syms.size());
  for (int32_t i = 0; i < n; ++i) {
    syms[i].prev = i - 1;
    syms[i].next = i + 1 < n ? i + 1 : -1;
  }
}

}  // namespace

void Tokenizer::emit_unknown_char(std::string_view ch, std::vector<int32_t>& out) const {
  bool all_bytes = opts_.byte_fallback;
  for (char c : ch) all_bytes = all_bytes && byte_token_[static_cast<uint8_t>(c)] >= 0;
  if (all_bytes) {
    for (char c : ch) out.push_back(byte_token_[static_cast<uint8_t>(c)]);
  } else if (unk_id_ >= 0) {
    if (!(opts_.fuse_unk && !out.empty() && out.back() == unk_id_)) out.push_back(unk_id_);
  }
  // With neither byte tokens nor an unknown token the character cannot be represented and is dropped.
}

void Tokenizer::encode_sp_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;

  if (opts_.algo == TokenizerAlgo::ScoreMerge) {
    struct Sym {
      uint32_t start, len;
      int32_t prev, next;
      int32_t id;  // piece id of text [start, start + len), or -1
    };
    struct Pair {
      float score;
      int32_t left, right;
      uint32_t size;
      int32_t id;
    };
    struct Worse {
      bool operator()(const Pair& a, const Pair& b) const {
        return a.score != b.score ? a.score < b.score : a.left > b.left;
      }
    };
    std::vector<Sym> syms;
    syms.reserve(word.size());
    for (size_t pos = 0; pos < word.size();) {
      const auto ch = unicode::decode_utf8(word, pos);
      const int32_t i = static_cast<int32_t>(syms.size());
      syms.push_back(Sym{static_cast<uint32_t>(pos), ch.len, i - 1, -1, lookup(word.substr(pos, ch.len))});
      if (i > 0) syms[i - 1].next = i;
      pos += ch.len;
    }
    std::vector<Pair> storage;
    storage.reserve(syms.size());
    std::priority_queue<Pair, std::vector<Pair>, Worse> queue(Worse{}, std::move(storage));
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      const uint32_t size = syms[l].len + syms[r].len;
      const int32_t id = lookup(word.substr(syms[l].start, size));
      if (id < 0) return;
      queue.push(Pair{scores_[id], l, r, size, id});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Pair p = queue.top();
      queue.pop();
      Sym& l = syms[p.left];
      Sym& r = syms[p.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != p.size || l.next != p.right) continue;
      l.len += r.len;
      l.id = p.id;
      r.len = 0;
      l.next = r.next;
      if (l.next >= 0) syms[l.next].prev = p.left;
      try_add(l.prev, p.left);
      try_add(p.left, l.next);
    }
    for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(syms.size()); i = syms[i].next) {
      if (syms[i].id >= 0) {
        out.push_back(syms[i].id);
      } else {
        emit_unknown_char(word.substr(syms[i].start, syms[i].len), out);
      }
    }
    return;
  }

  // RankMerge: characters -> ids (byte fallback / unk first), then ranked merges.
  std::vector<RankSym> syms;
  syms.reserve(word.size());
  bool last_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    const auto ch = unicode::decode_utf8(word, pos);
    const std::string_view text = word.substr(pos, ch.len);
    pos += ch.len;
    const int32_t id = lookup(text);
    if (id >= 0) {
      syms.push_back(RankSym{id, 0, 0, ch.len});
      last_unk = false;
      continue;
    }
    bool all_bytes = opts_.byte_fallback;
    for (char c : text) all_bytes = all_bytes && byte_token_[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (char c : text) syms.push_back(RankSym{byte_token_[static_cast<uint8_t>(c)], 0, 0, 1});
      last_unk = false;
    } else if (unk_id_ >= 0) {
      if (opts_.fuse_unk && last_unk) {
        syms.back().len += ch.len;
      } else {
        syms.push_back(RankSym{unk_id_, 0, 0, ch.len});
      }
      last_unk = true;
    }
  }
  link(syms);
  merge_ranked(syms, out);
}

void Tokenizer::encode_bytelevel_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (opts_.ignore_merges) {
    const auto& enc = bytelevel_encoding();
    std::string mapped;
    mapped.reserve(word.size() * 2);
    for (char c : word) mapped += enc[static_cast<uint8_t>(c)];
    if (const int32_t id = lookup(mapped); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<RankSym> syms;
  syms.reserve(word.size());
  for (char c : word) {
    const int32_t id = byte_token_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      syms.push_back(RankSym{id, 0, 0, 1});
    } else if (unk_id_ >= 0) {  // a vocabulary without all 256 byte characters (not GPT-2 compatible)
      syms.push_back(RankSym{unk_id_, 0, 0, 1});
    }
  }
  link(syms);
  merge_ranked(syms, out);
}

void Tokenizer::merge_ranked(std::vector<RankSym>& syms, std::vector<int32_t>& out) const {
  if (syms.empty()) return;
  std::vector<RankPair> storage;
  storage.reserve(syms.size());
  std::priority_queue<RankPair, std::vector<RankPair>, RankPairWorse> queue(RankPairWorse{},
                                                                            std::move(storage));
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || merges_.empty()) return;
    const uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(syms[l].id)) << 32) | static_cast<uint32_t>(syms[r].id);
    auto it = merges_.find(key);
    if (it == merges_.end()) return;
    queue.push(RankPair{it->second.rank, l, r, syms[l].len, syms[r].len, it->second.id});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const RankPair p = queue.top();
    queue.pop();
    RankSym& l = syms[p.left];
    RankSym& r = syms[p.right];
    if (l.len != p.left_len || r.len != p.right_len || l.next != p.right) continue;
    l.id = p.id;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (l.next >= 0) syms[l.next].prev = p.left;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace lowbit
