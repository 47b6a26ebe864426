// The one C++ file of librelcl: a thin shim that gives the relcl_spm_* C functions of
// relcl_data.h over SentencePiece's C++ API. Every entry point catches every exception and
// turns it, like SentencePiece's own status, into a relcl_status with a message.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>


extern "C" {
#include "base.h"
}
#include "relcl_data.h"

struct relcl_spm {
  sentencepiece::SentencePieceProcessor sp;
  std::string bytes; // the .model file
  uint64_t hash;
};

namespace {

// The same bytes always give the same model: SentencePiece's sampling of input sentences
// draws from this seed.
constexpr unsigned kTrainSeed = 20180306;

// A .model file is read whole; one of a million pieces is about 20 MB. The limit makes
// /dev/zero or a wrong path an error rather than an allocation failure.
constexpr size_t MAX_MODEL_BYTES = (size_t)64 << 20;

uint64_t fnv1a64(const std::string &s) {
  return relcl__fnv1a64(RELCL__FNV_BASIS, s.data(), s.size());
}

// SentencePiece's status as one line, without the trailing blank it sometimes has.
std::string status_text(const sentencepiece::util::Status &s) {
  std::string t = s.ToString();
  while (!t.empty() && (t.back() == ' ' || t.back() == '\n')) t.pop_back();
  return t;
}

// Failures of the C++ side: what was being done, then the exception's text.
relcl_status fail_exception(const char *what) {
  try {
    throw;
  } catch (const std::bad_alloc &) {
    return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
  } catch (const std::exception &e) {
    return relcl__fail(RELCL_ERR_FORMAT, "%s: %s", what, e.what());
  } catch (...) {
    return relcl__fail(RELCL_ERR_FORMAT, "%s: unknown C++ exception", what);
  }
}

// Feeds SentencePiece the non-empty lines of already validated texts.
class TextIterator : public sentencepiece::SentenceIterator {
public:
  explicit TextIterator(const std::vector<relcl_text *> &texts) : texts_(texts) { Skip(); }
  bool done() const override { return t_ >= texts_.size(); }
  void Next() override {
    i_++;
    Skip();
  }
  const std::string &value() const override { return value_; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

private:
  void Skip() {
    for (; t_ < texts_.size(); t_++, i_ = 0) {
      for (; i_ < relcl_text_count(texts_[t_]); i_++) {
        if (relcl_text_blank(texts_[t_], i_)) continue;
        size_t len;
        const char *s = relcl_text_line(texts_[t_], i_, &len);
        value_.assign(s, len);
        return;
      }
    }
  }
  const std::vector<relcl_text *> &texts_;
  size_t t_ = 0, i_ = 0;
  std::string value_;
};

relcl_status write_string(relcl__file_out *out, void *arg) {
  const std::string *data = static_cast<const std::string *>(arg);
  relcl__file_out_write(out, data->data(), data->size());
  return RELCL_OK; // a failed write is reported by relcl__write_atomic
}

// Write path atomically: a temporary file beside it, fsync, rename, fsync of the directory.
relcl_status write_atomic(const std::string &path, std::string &data) {
  return relcl__write_atomic(path.c_str(), write_string, &data);
}

relcl_status load(relcl_spm **out, const char *name, std::string &&bytes) {
  std::unique_ptr<relcl_spm> m(new relcl_spm);
  m->bytes = std::move(bytes);
  m->hash = fnv1a64(m->bytes);
  const auto s = m->sp.LoadFromSerializedProto(m->bytes);
  if (!s.ok())
    return relcl__fail(RELCL_ERR_FORMAT, "%s: not a SentencePiece model: %s", name,
                       status_text(s).c_str());
  if (m->sp.pad_id() != RELCL_PAD_ID || m->sp.unk_id() != RELCL_UNK_ID ||
      m->sp.bos_id() != RELCL_BOS_ID || m->sp.eos_id() != RELCL_EOS_ID)
    return relcl__fail(
        RELCL_ERR_FORMAT,
        "%s: SentencePiece model has pad/unk/bos/eos ids %d/%d/%d/%d, relcl needs 0/1/2/3", name,
        m->sp.pad_id(), m->sp.unk_id(), m->sp.bos_id(), m->sp.eos_id());
  *out = m.release();
  return RELCL_OK;
}

} // namespace

extern "C" relcl_status relcl_spm_train(const char *const *inputs, int n_inputs, int vocab_size,
                                        const char *model_prefix) {
  relcl__clear_error();
  if (inputs == nullptr || n_inputs <= 0 || model_prefix == nullptr || model_prefix[0] == '\0')
    return relcl__fail(RELCL_ERR_INVALID_ARG, "spm_train: needs input files and a model prefix");
  if (vocab_size < 8)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "spm_train: vocab_size %d is below 8", vocab_size);
  std::vector<relcl_text *> texts;
  relcl_status st = RELCL_OK;
  try {
    size_t lines = 0;
    for (int i = 0; i < n_inputs; i++) {
      relcl_text *t = nullptr;
      if ((st = relcl_text_read(&t, inputs[i])) != RELCL_OK) goto done;
      texts.push_back(t);
      for (size_t k = 0; k < relcl_text_count(t); k++) lines += !relcl_text_blank(t, k);
    }
    if (lines == 0) {
      st = relcl__fail(RELCL_ERR_INVALID_ARG, "spm_train: %s: no non-empty lines", inputs[0]);
      goto done;
    }
    {
      const std::unordered_map<std::string, std::string> args = {
          {"vocab_size", std::to_string(vocab_size)},
          {"model_type", "unigram"},
          {"character_coverage", "1.0"},
          {"normalization_rule_name", "identity"},
          {"pad_id", "0"},
          {"unk_id", "1"},
          {"bos_id", "2"},
          {"eos_id", "3"},
          {"pad_piece", "<pad>"},
          {"unk_piece", "<unk>"},
          {"bos_piece", "<s>"},
          {"eos_piece", "</s>"},
          {"num_threads", "1"},
          {"input_sentence_size", "2000000"},
          {"shuffle_input_sentence", "true"},
          {"hard_vocab_limit", "false"},
          {"minloglevel", "2"},
      };
      sentencepiece::SetRandomGeneratorSeed(kTrainSeed);
      TextIterator it(texts);
      std::string model;
      const auto s = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
      if (!s.ok()) {
        st = relcl__fail(RELCL_ERR_INVALID_ARG, "spm_train: SentencePiece: %s",
                         status_text(s).c_str());
        goto done;
      }
      // Check the model before writing it, and take the .vocab from it.
      relcl_spm *m = nullptr;
      if ((st = load(&m, "spm_train", std::string(model))) != RELCL_OK) goto done;
      std::string vocab;
      for (int id = 0; id < m->sp.GetPieceSize(); id++) {
        char score[32];
        snprintf(score, sizeof score, "%g", (double)m->sp.GetScore(id));
        vocab += m->sp.IdToPiece(id) + "\t" + score + "\n";
      }
      relcl_spm_destroy(m);
      const std::string prefix(model_prefix);
      if ((st = write_atomic(prefix + ".model", model)) != RELCL_OK) goto done;
      st = write_atomic(prefix + ".vocab", vocab);
    }
  } catch (...) {
    st = fail_exception("spm_train");
  }
done:
  for (relcl_text *t : texts) relcl_text_destroy(t);
  return st;
}

extern "C" relcl_status relcl_spm_load(relcl_spm **out, const char *model_path) {
  relcl__clear_error();
  if (out == nullptr || model_path == nullptr)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "spm_load: NULL argument");
  *out = nullptr;
  char *text = nullptr;
  size_t size = 0;
  relcl_status st = relcl__read_file(model_path, MAX_MODEL_BYTES, "SentencePiece model", &text,
                                     &size);
  if (st != RELCL_OK) return st;
  try {
    st = load(out, model_path, std::string(text, size));
  } catch (...) {
    st = fail_exception(model_path);
  }
  free(text);
  return st;
}

extern "C" relcl_status relcl_spm_load_bytes(relcl_spm **out, const void *bytes, size_t size) {
  relcl__clear_error();
  if (out == nullptr || (bytes == nullptr && size > 0))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "spm_load_bytes: NULL argument");
  *out = nullptr;
  try {
    return load(out, "SentencePiece model in memory",
                std::string(static_cast<const char *>(bytes), size));
  } catch (...) {
    return fail_exception("spm_load_bytes");
  }
}

extern "C" void relcl_spm_destroy(relcl_spm *spm) { delete spm; }

extern "C" int relcl_spm_vocab_size(const relcl_spm *spm) {
  return spm ? spm->sp.GetPieceSize() : 0;
}

extern "C" uint64_t relcl_spm_hash(const relcl_spm *spm) { return spm ? spm->hash : 0; }

extern "C" const void *relcl_spm_bytes(const relcl_spm *spm, size_t *size) {
  if (size) *size = spm ? spm->bytes.size() : 0;
  return spm ? spm->bytes.data() : nullptr;
}

extern "C" const char *relcl_spm_piece(const relcl_spm *spm, int32_t id) {
  if (spm == nullptr || id < 0 || id >= spm->sp.GetPieceSize()) return "";
  try {
    return spm->sp.IdToPiece(id).c_str();
  } catch (...) {
    return "";
  }
}

extern "C" relcl_status relcl_spm_encode(const relcl_spm *spm, const char *text, int32_t **ids,
                                         size_t *n) {
  relcl__clear_error();
  if (spm == nullptr || text == nullptr || ids == nullptr || n == nullptr)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "spm_encode: NULL argument");
  *ids = nullptr;
  *n = 0;
  try {
    std::vector<int> v;
    const auto s = spm->sp.Encode(text, &v);
    if (!s.ok())
      return relcl__fail(RELCL_ERR_FORMAT, "spm_encode: SentencePiece: %s", status_text(s).c_str());
    if (v.empty()) return RELCL_OK;
    int32_t *p = static_cast<int32_t *>(malloc(v.size() * sizeof *p));
    if (p == nullptr) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "spm_encode: out of memory");
    for (size_t i = 0; i < v.size(); i++) p[i] = v[i];
    *ids = p;
    *n = v.size();
    return RELCL_OK;
  } catch (...) {
    return fail_exception("spm_encode");
  }
}

extern "C" relcl_status relcl_spm_decode(const relcl_spm *spm, const int32_t *ids, size_t n,
                                         char **text) {
  relcl__clear_error();
  if (spm == nullptr || text == nullptr || (ids == nullptr && n > 0))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "spm_decode: NULL argument");
  *text = nullptr;
  try {
    const int size = spm->sp.GetPieceSize();
    std::vector<int> v(ids, ids + n);
    for (size_t i = 0; i < n; i++)
      if (v[i] < 0 || v[i] >= size)
        return relcl__fail(RELCL_ERR_INVALID_ARG,
                           "spm_decode: id %d at position %zu is outside the vocabulary of %d",
                           v[i], i, size);
    std::string s;
    const auto st = spm->sp.Decode(v, &s);
    if (!st.ok())
      return relcl__fail(RELCL_ERR_FORMAT, "spm_decode: SentencePiece: %s",
                         status_text(st).c_str());
    char *p = static_cast<char *>(malloc(s.size() + 1));
    if (p == nullptr) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "spm_decode: out of memory");
    memcpy(p, s.c_str(), s.size() + 1);
    *text = p;
    return RELCL_OK;
  } catch (...) {
    return fail_exception("spm_decode");
  }
}
