/* relcl data: parallel text in, padded batches of subword ids out, all on the host.
 * Reading validates (line counts, UTF-8, NUL bytes) and never truncates silently; subwords
 * come from SentencePiece; batches are length-bucketed and shuffled per epoch from a seed.
 *
 * Conventions are those of relcl.h: every fallible call returns relcl_status and leaves a
 * one-line message in relcl_last_error() ("FILE:LINE: what" for bad input), handles are
 * opaque, relcl_X_destroy(NULL) is a no-op. Nothing here prints.
 */
#ifndef RELCL_DATA_H
#define RELCL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "relcl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ids every relcl vocabulary reserves. */
enum { RELCL_PAD_ID = 0, RELCL_UNK_ID = 1, RELCL_BOS_ID = 2, RELCL_EOS_ID = 3 };

/* ---- text files -------------------------------------------------------------------- */

typedef struct relcl_text relcl_text;

/* Read every line of a UTF-8 text file into memory. A file that starts with the xz magic
 * bytes is decompressed on the fly, whatever its name. A line ends at '\n' (a last line
 * without one still counts); one '\r' before it is dropped, as is a UTF-8 byte-order mark
 * at the start of the file. Invalid UTF-8 (including overlong forms, surrogates and code
 * points past U+10FFFF) or a NUL byte fails with RELCL_ERR_FORMAT "FILE:LINE: ..."; a file
 * that cannot be read, RELCL_ERR_IO. */
relcl_status relcl_text_read(relcl_text **out, const char *path);
void relcl_text_destroy(relcl_text *text);
size_t relcl_text_count(const relcl_text *text);
/* Line i (from 0; line i+1 of the file), NUL-terminated, owned by text. len may be NULL. */
const char *relcl_text_line(const relcl_text *text, size_t i, size_t *len);
/* 1 when line i holds nothing but spaces and tabs: such lines count as empty. */
int relcl_text_blank(const relcl_text *text, size_t i);

/* ---- SentencePiece subwords -------------------------------------------------------- */

typedef struct relcl_spm relcl_spm;

/* Train one shared unigram model on every non-empty line of the input files (read as by
 * relcl_text_read, so .xz works and bad input fails the same way) and write
 * PREFIX.model and PREFIX.vocab, each atomically (temporary file, fsync, rename).
 * Fixed choices: pad=0 unk=1 bos=2 eos=3 (<pad> <unk> <s> </s>), character_coverage 1.0,
 * "identity" normalization (decoded text keeps the corpus's own characters), one thread,
 * a fixed random seed and at most 2,000,000 sentences, so the same input gives the same
 * model bytes. The vocabulary may come out smaller than vocab_size on a tiny text
 * (hard_vocab_limit=false): ask relcl_spm_vocab_size. SentencePiece's own logging is
 * silenced below errors. */
relcl_status relcl_spm_train(const char *const *inputs, int n_inputs, int vocab_size,
                             const char *model_prefix);

/* Load a model file (PREFIX.model), or a model from memory (the bytes of such a file).
 * A model whose pad/unk/bos/eos ids are not 0/1/2/3 is refused (RELCL_ERR_FORMAT). */
relcl_status relcl_spm_load(relcl_spm **out, const char *model_path);
relcl_status relcl_spm_load_bytes(relcl_spm **out, const void *bytes, size_t size);
void relcl_spm_destroy(relcl_spm *spm);

int relcl_spm_vocab_size(const relcl_spm *spm);
/* FNV-1a 64 over the model's bytes (the .model file): what checkpoints record. */
uint64_t relcl_spm_hash(const relcl_spm *spm);
/* The model's bytes (owned by spm), e.g. to embed the vocabulary in a checkpoint. */
const void *relcl_spm_bytes(const relcl_spm *spm, size_t *size);
/* The piece of id ("▁the", "<unk>"), owned by spm; "" when id is out of range. */
const char *relcl_spm_piece(const relcl_spm *spm, int32_t id);

/* Subword ids of a NUL-terminated UTF-8 text, without BOS/EOS. *ids is malloc'ed (NULL
 * when *n is 0): the caller frees it with free(). */
relcl_status relcl_spm_encode(const relcl_spm *spm, const char *text, int32_t **ids, size_t *n);
/* Text of n ids; pad, bos and eos decode to nothing. An id outside the vocabulary is
 * RELCL_ERR_INVALID_ARG. *text is malloc'ed and NUL-terminated: the caller frees it. */
relcl_status relcl_spm_decode(const relcl_spm *spm, const int32_t *ids, size_t n, char **text);

/* ---- parallel corpus --------------------------------------------------------------- */

typedef struct relcl_corpus relcl_corpus;

typedef struct relcl_corpus_stats {
  size_t lines;                  /* lines in each file */
  size_t pairs;                  /* pairs kept */
  size_t empty;                  /* pairs skipped: a side empty, blank, or no subwords */
  size_t too_long;               /* pairs skipped: a side over max_length subwords */
  size_t src_tokens, tgt_tokens; /* subwords in kept pairs, without BOS/EOS */
  int src_max, tgt_max;          /* longest kept side, in subwords */
} relcl_corpus_stats;

/* Read a parallel corpus (line i of src_path translates to line i of tgt_path; .xz as in
 * relcl_text_read) and encode both sides with spm. Files whose line counts differ fail with
 * RELCL_ERR_FORMAT naming both files and both counts. A pair with an empty or blank line on
 * either side is skipped and counted in `empty`; a pair with more than max_length subwords
 * (BOS/EOS not counted) on either side is skipped and counted in `too_long`; max_length
 * <= 0 keeps every length. spm is only used during the call. */
relcl_status relcl_corpus_load(relcl_corpus **out, const char *src_path, const char *tgt_path,
                               const relcl_spm *spm, int max_length);
/* An empty corpus to fill with relcl_corpus_add (tests, or ids from elsewhere). */
relcl_status relcl_corpus_create(relcl_corpus **out);
/* Append one pair (both sides at least one id, no BOS/EOS); line is recorded as given. */
relcl_status relcl_corpus_add(relcl_corpus *corpus, const int32_t *src, int src_len,
                              const int32_t *tgt, int tgt_len, size_t line);
void relcl_corpus_destroy(relcl_corpus *corpus);

size_t relcl_corpus_size(const relcl_corpus *corpus);
void relcl_corpus_get_stats(const relcl_corpus *corpus, relcl_corpus_stats *stats);
/* Ids of pair i's sides, owned by corpus; *len gets the count. */
const int32_t *relcl_corpus_src(const relcl_corpus *corpus, size_t i, int *len);
const int32_t *relcl_corpus_tgt(const relcl_corpus *corpus, size_t i, int *len);
/* Line number (from 1) of pair i in the files: finds its reference text after skips. */
size_t relcl_corpus_line(const relcl_corpus *corpus, size_t i);

/* ---- batches ----------------------------------------------------------------------- */

typedef struct relcl_batch_opts {
  size_t batch_tokens; /* budget: every batch has B * max(S, T) <= batch_tokens */
  uint64_t seed;       /* of the per-epoch shuffle */
  int shuffle;         /* 1: shuffle every epoch; 0: the same length-sorted order always */
  int src_eos;         /* 1: append EOS to each source (as fairseq and Marian do) */
} relcl_batch_opts;

/* {batch_tokens, seed, shuffle = 1, src_eos = 1} */
relcl_batch_opts relcl_batch_opts_default(size_t batch_tokens, uint64_t seed);

/* One batch of B pairs, rows padded with RELCL_PAD_ID. Arrays belong to the batcher and
 * stay valid until its next call. For a target y_1..y_m: tgt_in = BOS y_1..y_m and
 * tgt_out = y_1..y_m EOS, both of length m + 1. */
typedef struct relcl_batch {
  uint64_t epoch;                /* position of this batch: epoch (from 0) */
  size_t index;                  /* and index within the epoch (from 0) */
  int batch;                     /* B */
  int src_len, tgt_len;          /* S, T: longest row of each side */
  const int32_t *src;            /* (B, S) */
  const int32_t *tgt_in;         /* (B, T) */
  const int32_t *tgt_out;        /* (B, T) */
  const int32_t *src_lens;       /* (B) ids before padding, EOS included */
  const int32_t *tgt_lens;       /* (B) m + 1 */
  const size_t *pairs;           /* (B) corpus index of each row */
  size_t src_tokens, tgt_tokens; /* sums of src_lens and tgt_lens */
} relcl_batch;

typedef struct relcl_batcher relcl_batcher;

/* Batches over a corpus, which must outlive the batcher and not change meanwhile.
 *
 * Every pair p has a cost length L(p) = max(S_p, T_p), S_p = |x| + src_eos, T_p = |y| + 1.
 * Sorting the pairs by L (stable) and cutting that sequence greedily, a batch takes the next
 * pair while (rows + 1) * L(next) <= batch_tokens: so the cuts depend on the lengths only,
 * and every epoch has the same count of batches, each within the budget. An epoch
 * e with shuffle draws from splitmix64 (state += 0x9E3779B97F4A7C15; z = state;
 * z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB; z ^ z>>31)
 * started at state = seed ^ (0xD1B54A32D192ED03 * (e + 1)); a draw below n takes z % n,
 * rejecting z < 2^64 mod n. It Fisher-Yates shuffles the pair indices (i from n-1 down to
 * 1, swap with a draw below i+1), sorts them stably by L, cuts as above, then shuffles the
 * order of the batches the same way. Same corpus, options and epoch: the same batches on
 * any machine.
 *
 * A batch_tokens below the longest pair's L is RELCL_ERR_INVALID_ARG, as is an empty
 * corpus. */
relcl_status relcl_batcher_create(relcl_batcher **out, const relcl_corpus *corpus,
                                  const relcl_batch_opts *opts);
void relcl_batcher_destroy(relcl_batcher *batcher);
/* Batches per epoch (the same for every epoch). */
size_t relcl_batcher_count(const relcl_batcher *batcher);
/* The batch at (epoch, index); does not move the position. */
relcl_status relcl_batcher_get(relcl_batcher *batcher, uint64_t epoch, size_t index,
                               relcl_batch *out);
/* The batch at the position, then advance (after the last batch of an epoch comes batch 0
 * of the next). The position starts at (0, 0). */
relcl_status relcl_batcher_next(relcl_batcher *batcher, relcl_batch *out);
/* Position of the batch next() returns: record it in a checkpoint, seek to it to resume.
 * seek accepts index == count, meaning (epoch + 1, 0). */
void relcl_batcher_tell(const relcl_batcher *batcher, uint64_t *epoch, size_t *index);
relcl_status relcl_batcher_seek(relcl_batcher *batcher, uint64_t epoch, size_t index);

#ifdef __cplusplus
}
#endif
#endif
