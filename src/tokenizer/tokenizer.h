// Tokenizers: text <-> token ids for every checkpoint source lowbit reads.
//
//  * llama2.c tokenizer.bin            score-ordered merges (exactly llama2.c's encode), byte fallback
//  * GGUF "llama"                      SentencePiece BPE as llama.cpp's SPM tokenizer (score-ordered merges)
//  * GGUF "gpt2"                       byte-level BPE with rank-ordered merges and a regex pre-tokenizer
//                                      (tokenizer.ggml.pre: default/gpt-2, llama-bpe/llama3, qwen2)
//  * Hugging Face tokenizer.json BPE   SentencePiece style (Prepend/Replace normalizer or Metaspace, byte
//  fallback)
//                                      or byte-level style (ByteLevel / Split pre-tokenizers), rank-ordered
//                                      merges
//
// One concrete class covers them all: the algorithms differ only in a few options (how text is normalized and
// split into words, and whether merges are ordered by score or by rank), so the options are data, not
// subclasses. See docs/tokenizers.md for the algorithms and the test vectors.
//
// Invalid UTF-8 in text to encode never throws: each invalid byte becomes its byte-fallback token <0xXX> (SPM
// vocabularies), its byte-level character (byte-level BPE), or the unknown token when the vocabulary has
// neither.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lowbit {

namespace io {
struct GgufFile;
struct Llama2cTokenizerData;
}  // namespace io

// Token attributes (the GGUF tokenizer.ggml.token_type values).
enum class TokenAttr : uint8_t {
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6
};

enum class TokenizerAlgo : uint8_t {
  ScoreMerge,  // SentencePiece BPE as llama2.c / llama.cpp: merge the adjacent pair whose result scores
               // highest
  RankMerge,   // Hugging Face BPE: apply the merge with the lowest rank first (SentencePiece-style text)
  ByteLevel,   // GPT-2 style: bytes mapped to printable characters, regex pre-tokenizer, rank-ordered merges
};

// Regex pre-tokenizers of the byte-level BPE family, matched by hand-written state machines.
enum class PreTokenizer : uint8_t { None, Gpt2, Llama3, Qwen2 };

// When the SentencePiece dummy prefix ("▁" or " ") is put in front of a piece of text.
enum class PrefixMode : uint8_t {
  Never,
  Always,        // every text segment between special tokens (HF Prepend normalizer, Metaspace "always")
  First,         // only the segment at the start of the input (HF Metaspace "first")
  AfterSpecial,  // the start of the input and every segment that follows a special token (llama.cpp SPM)
};

// Everything that selects the algorithm; filled by the loaders, exposed for tests and diagnostics.
struct TokenizerOptions {
  TokenizerAlgo algo = TokenizerAlgo::ScoreMerge;
  std::string name;  // "llama2c", "gguf-llama", "gguf-gpt2", "hf-bpe", "hf-bytelevel"
  PrefixMode prefix = PrefixMode::Never;
  bool prefix_if_missing = false;  // skip the prefix when the text already starts with a space (HF Metaspace,
                                   // HF ByteLevel add_prefix_space)
  bool escape_spaces = false;  // ' ' -> "▁" before merging (vocabulary stores "▁"), and back when decoding
  bool metaspace_split = false;  // split words before each "▁" (HF Metaspace split=true)
  bool byte_fallback = true;     // unknown characters -> <0xXX> tokens when present
  bool fuse_unk = false;         // consecutive unknown characters become one unknown token (HF fuse_unk)
  PreTokenizer pretok = PreTokenizer::None;
  bool split_digits = false;   // isolate every digit before the regex pre-tokenizer (HF Digits)
  bool ignore_merges = false;  // a word that is already a token is emitted whole (HF ignore_merges)
  bool strip_decoded_prefix =
      false;  // decoding drops the dummy-prefix space of the first token (and after BOS)
};

class Tokenizer {
 public:
  // Low-level constructor used by the loaders and by tests. pieces are token texts as the vocabulary stores
  // them (with "▁" for SentencePiece, byte-level characters for GPT-2 style); scores are used by ScoreMerge;
  // merges (pairs of pieces, best first) by RankMerge/ByteLevel; attrs default to Normal. Throws
  // Error("model") on inconsistent input (sizes, ids out of range, merges naming unknown pieces are skipped).
  Tokenizer(TokenizerOptions opts, std::vector<std::string> pieces, std::vector<float> scores,
            std::vector<TokenAttr> attrs, const std::vector<std::pair<std::string, std::string>>& merges,
            int32_t bos_id, int32_t eos_id, int32_t unk_id);

  // Text -> ids. add_bos prepends bos_id() (if the vocabulary has one). parse_special: control tokens written
  // as text (e.g. "<|start_story|>", "<s>") map to their ids; user-defined added tokens always do.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = false) const;

  // Raw bytes of one token: byte-fallback pieces <0xAB> -> that byte, "▁" -> ' ', byte-level characters ->
  // their bytes. Control tokens (BOS/EOS/...) render as "" unless render_special. May be partial UTF-8.
  std::string decode_token(int32_t id, bool render_special = false) const;
  // Concatenated bytes of ids, dropping the dummy-prefix space of the first text token (and after BOS) when
  // the tokenizer adds one, so that decode(encode(x)) == x.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  // The token text as stored in the vocabulary (e.g. "▁Once", "Ġthe", "<0x0A>"). Throws on a bad id.
  const std::string& piece(int32_t id) const;
  // Exact lookup of a stored piece; -1 when absent.
  int32_t piece_to_id(std::string_view piece) const;
  TokenAttr attr(int32_t id) const;
  // The merge score of a piece (ScoreMerge vocabularies: llama2.c, GGUF "llama"); 0 where none was given.
  float score(int32_t id) const;
  bool is_control(int32_t id) const;

  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const { return bos_id_; }  // -1 when none
  int32_t eos_id() const { return eos_id_; }  // -1 when none
  int32_t unk_id() const { return unk_id_; }  // -1 when none
  int32_t pad_id() const { return pad_id_; }  // -1 when none
  // Whether the checkpoint asks for BOS by default (add_bos_token / post-processor template).
  bool add_bos_default() const { return add_bos_default_; }
  // End-of-generation ids: EOS plus tokens such as <|eot_id|>, <|im_end|>, <|endoftext|> when present.
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  bool is_eog(int32_t id) const;
  const TokenizerOptions& options() const { return opts_; }

  // Loader hooks (after construction).
  void set_pad_id(int32_t id) { pad_id_ = id; }
  void set_add_bos_default(bool v) { add_bos_default_ = v; }
  void add_eog_id(int32_t id);
  // Registers text that maps to a token id when found in the input. special=true: only with parse_special.
  // lstrip/rstrip: the match also swallows whitespace on its left/right (HF added-token options).
  void add_special_text(std::string text, int32_t id, bool special, bool lstrip = false, bool rstrip = false);

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  struct SpecialText {
    std::string text;
    int32_t id;
    bool special, lstrip, rstrip;
  };
  struct Segment {
    std::string_view text;  // raw text when id < 0
    int32_t id = -1;        // special token id
  };
  struct RankSym {
    int32_t id;
    int32_t prev, next;
    uint32_t len;  // bytes of text covered; 0 once merged into its left neighbour
  };
  struct StrHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::vector<Segment> split_special(std::string_view text, bool parse_special) const;
  void encode_segment(std::string_view text, bool at_start, bool after_special,
                      std::vector<int32_t>& out) const;
  void encode_sp_word(std::string_view word, std::vector<int32_t>& out) const;  // ScoreMerge / RankMerge
  void encode_bytelevel_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_ranked(std::vector<RankSym>& syms, std::vector<int32_t>& out) const;
  void emit_unknown_char(std::string_view ch, std::vector<int32_t>& out) const;
  int32_t lookup(std::string_view s) const;

  TokenizerOptions opts_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<TokenAttr> attrs_;
  std::vector<std::string> decoded_;  // raw bytes per token, precomputed
  std::unordered_map<std::string, int32_t, StrHash, std::equal_to<>> piece_to_id_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank and merged id
  std::array<int32_t, 256> byte_token_{};  // <0xXX> token (SPM) or byte-level character token; -1 if absent
  std::vector<SpecialText> specials_;      // in registration order
  std::unordered_map<std::string, uint32_t> special_pos_;  // text -> index into specials_
  std::array<std::vector<uint32_t>, 256>
      special_index_;  // first byte -> indices into specials_, longest first
  int32_t bos_id_ = -1, eos_id_ = -1, unk_id_ = -1, pad_id_ = -1;
  bool add_bos_default_ = true;
  std::vector<int32_t> eog_ids_;

  friend class TokenStreamDecoder;
};

// Incremental detokenizer for streaming generation: push ids one at a time and get text that is always whole
// UTF-8 characters. Bytes of an incomplete character are held until the rest arrives; bytes that can never
// form a valid character are replaced by U+FFFD so the output is always valid UTF-8 (safe for JSON).
class TokenStreamDecoder {
 public:
  explicit TokenStreamDecoder(const Tokenizer& tok, bool render_special = false);
  std::string push(int32_t id);
  // The ids to come continue `prefix` (a prompt): when it ends in text, the first text token's leading space
  // is part of the continuation and is kept ("Once" + " upon"), instead of being dropped as the dummy prefix
  // of a text that starts there.
  void continue_from(std::span<const int32_t> prefix);
  // Emits what is still held (an incomplete character becomes U+FFFD) and resets the prefix state.
  std::string flush();

 private:
  std::string take_complete(bool final);
  const Tokenizer& tok_;
  bool render_special_;
  bool at_start_ = true;  // the next text token may carry the dummy-prefix space to strip
  std::string pending_;
};

// Factories. Unknown or unsupported tokenizer types throw Error("model") naming the type and what is
// supported.
Tokenizer load_tokenizer_llama2c(const io::Llama2cTokenizerData& data, int32_t bos_id = 1,
                                 int32_t eos_id = 2);
Tokenizer load_tokenizer_hf(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config);
Tokenizer load_tokenizer_gguf(const io::GgufFile& gguf);

// Bytes -> printable characters of GPT-2's byte-level BPE (e.g. ' ' -> "Ġ"), as UTF-8.
const std::array<std::string, 256>& bytelevel_encoding();
// Splits text with a byte-level pre-tokenizer regex; returns [begin, end) byte offsets of each word.
std::vector<std::pair<size_t, size_t>> pretokenize(PreTokenizer kind, std::string_view text);

}  // namespace lowbit
