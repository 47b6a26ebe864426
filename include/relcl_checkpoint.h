/* relcl checkpoints: float32 tensors and string metadata in safetensors files, written
 * atomically and checked strictly on reading, plus the model-directory helpers (list by
 * step, keep the last N, fall back past a corrupt newest one) and checkpoint averaging.
 * Host-only: nothing here touches OpenCL.
 *
 * File format: safetensors exactly (https://github.com/huggingface/safetensors), so the
 * Python `safetensors` package loads relcl checkpoints:
 *   8 bytes   N, little-endian u64: length of the JSON header
 *   N bytes   JSON object {"__metadata__": {"key": "value", ...},
 *                          "NAME": {"dtype": "F32", "shape": [d0, ...],
 *                                   "data_offsets": [begin, end]}, ...}
 *             padded with spaces so that the data starts at a multiple of 8 bytes
 *   data      the tensors, little-endian float32, row-major, back to back from offset 0 in
 *             the order they were given to relcl_checkpoint_save; offsets count from here
 *
 * Integrity: relcl adds two metadata entries, each 16 lowercase hex digits of FNV-1a 64
 * (offset basis 0xcbf29ce484222325, prime 0x100000001b3):
 *   "relcl.data_fnv1a64"    over every byte of the data section;
 *   "relcl.header_fnv1a64"  over a canonical form of the header, independent of JSON
 *                           spacing and key order: for each tensor in data order
 *                           NAME \0 "F32" \0 d0 "," d1 "," ... \0 begin "," end \0 (decimal),
 *                           then "__metadata__" \0, then for each metadata entry sorted by
 *                           key (bytewise), except this one: KEY \0 VALUE \0.
 * so a flipped bit anywhere (data, a name, a shape, a metadata value) is refused.
 *
 * Errors: relcl_status as in relcl.h; relcl_last_error() holds one line. A bad file is
 * RELCL_ERR_FORMAT with "PATH: what is wrong"; a missing or unreadable file is
 * RELCL_ERR_IO with "PATH: strerror". Strings returned by a checkpoint handle belong to it
 * and live until relcl_checkpoint_close.
 */
#ifndef RELCL_CHECKPOINT_H
#define RELCL_CHECKPOINT_H

#include "relcl.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RELCL_CHECKPOINT_MAX_DIMS 8
/* Metadata keys written (and verified) by relcl itself; callers may not set them. */
#define RELCL_CHECKPOINT_DATA_HASH_KEY "relcl.data_fnv1a64"
#define RELCL_CHECKPOINT_HEADER_HASH_KEY "relcl.header_fnv1a64"
/* Metadata key that must match for checkpoints to be averaged. */
#define RELCL_CHECKPOINT_CONFIG_KEY "relcl.config"

/* One float32 tensor. For saving, the caller fills it and keeps name and data alive during
 * the call; data may be NULL only when the tensor has no element. ndim 0 is a scalar. */
typedef struct relcl_checkpoint_tensor {
  const char *name;
  int ndim;
  size_t shape[RELCL_CHECKPOINT_MAX_DIMS];
  const float *data;
} relcl_checkpoint_tensor;

typedef struct relcl_checkpoint_meta {
  const char *key;
  const char *value;
} relcl_checkpoint_meta;

/* ---- writing ----------------------------------------------------------------------- */

/* Write tensors (in this order) and metadata to path, atomically: a temporary file
 * ".NAME.tmp-XXXXXX" in the same directory is written, flushed, fsync'ed and renamed over
 * path, then the directory is fsync'ed. On failure the temporary file is removed and path
 * is left as it was (a process killed mid-save leaves only a stray temporary file, which
 * is never taken for a checkpoint; see relcl_checkpoint_dir_clean).
 * Names must be non-empty, unique and not "__metadata__"; metadata keys unique and not
 * relcl's own hash keys. Values are any strings. */
relcl_status relcl_checkpoint_save(const char *path, const relcl_checkpoint_tensor *tensors,
                                   size_t n_tensors, const relcl_checkpoint_meta *meta,
                                   size_t n_meta);

/* ---- reading ----------------------------------------------------------------------- */

typedef struct relcl_checkpoint relcl_checkpoint;

/* Read and validate the whole file: header length, JSON, dtypes (F32 only), shapes against
 * offsets, offsets contiguous from 0 to the end of the file (no gap, overlap or trailing
 * bytes), unique names, both checksums. Files without relcl's checksums are refused unless
 * flags has RELCL_CHECKPOINT_FOREIGN (files written by other tools). */
enum { RELCL_CHECKPOINT_FOREIGN = 1 };
relcl_status relcl_checkpoint_open(const char *path, int flags, relcl_checkpoint **out);
void relcl_checkpoint_close(relcl_checkpoint *ck);

const char *relcl_checkpoint_path(const relcl_checkpoint *ck);

/* Tensors in data order, i < count. The data pointer is into the handle's memory. */
size_t relcl_checkpoint_tensor_count(const relcl_checkpoint *ck);
relcl_checkpoint_tensor relcl_checkpoint_tensor_at(const relcl_checkpoint *ck, size_t i);
/* Look a tensor up by name; RELCL_ERR_FORMAT "PATH: no tensor NAME" when absent. */
relcl_status relcl_checkpoint_find(const relcl_checkpoint *ck, const char *name,
                                   relcl_checkpoint_tensor *out);
/* Copy tensor name into dst after checking that its shape is exactly (shape[0], ...);
 * a different shape is RELCL_ERR_FORMAT "PATH: tensor NAME has shape (..), expected (..)". */
relcl_status relcl_checkpoint_read(const relcl_checkpoint *ck, const char *name, int ndim,
                                   const size_t *shape, float *dst);

/* Metadata value of key, or NULL when absent. Entries are sorted by key. */
const char *relcl_checkpoint_meta_get(const relcl_checkpoint *ck, const char *key);
size_t relcl_checkpoint_meta_count(const relcl_checkpoint *ck);
relcl_checkpoint_meta relcl_checkpoint_meta_at(const relcl_checkpoint *ck, size_t i);

/* ---- model directories ------------------------------------------------------------- */

/* A model directory holds "ckpt-SSSSSSSS.safetensors" (step, at least 8 digits, no extra
 * leading zeros) and "best.safetensors"; every other name is ignored. */
#define RELCL_CHECKPOINT_BEST_NAME "best.safetensors"

/* dir/ckpt-SSSSSSSS.safetensors into buf; RELCL_ERR_INVALID_ARG when it does not fit. */
relcl_status relcl_checkpoint_step_path(const char *dir, uint64_t step, char *buf,
                                        size_t size);

typedef struct relcl_checkpoint_list {
  size_t count;
  uint64_t *steps; /* ascending */
  char **paths;    /* paths[i] = dir/ckpt-<steps[i]>.safetensors */
  char *best;      /* dir/best.safetensors, or NULL when there is none */
} relcl_checkpoint_list;

/* List a directory's checkpoints (names only: nothing is opened). A missing directory is
 * RELCL_ERR_IO. Free with relcl_checkpoint_list_free (also safe on a zeroed list). */
relcl_status relcl_checkpoint_list_dir(const char *dir, relcl_checkpoint_list *out);
void relcl_checkpoint_list_free(relcl_checkpoint_list *list);

/* Delete every ckpt-* file but the keep >= 1 with the highest steps; best.safetensors and
 * other files are never touched. */
relcl_status relcl_checkpoint_keep_last(const char *dir, size_t keep);

/* Remove stray temporary files left by a save that was killed (".*.safetensors.tmp-*").
 * Call it when no other process is saving into dir. *removed (may be NULL) gets the count. */
relcl_status relcl_checkpoint_dir_clean(const char *dir, size_t *removed);

/* Open the newest ckpt-* that validates, trying older ones when it does not. *skipped
 * (may be NULL) receives NULL when the newest was fine, else a malloc'ed text with one
 * line "PATH: why" per checkpoint passed over (caller frees), so the app can say so.
 * No ckpt-* at all: RELCL_ERR_IO "DIR: no checkpoint". None valid: RELCL_ERR_FORMAT
 * naming the directory and the oldest one's fault. best.safetensors is not considered. */
relcl_status relcl_checkpoint_open_latest(const char *dir, relcl_checkpoint **out,
                                          char **skipped);

/* ---- averaging --------------------------------------------------------------------- */

/* What an averaged checkpoint's metadata adds: the number of inputs, and their paths as a
 * JSON array of strings. relcl-train --resume refuses a checkpoint with these. */
#define RELCL_CHECKPOINT_AVERAGE_KEY "relcl.average_of"
#define RELCL_CHECKPOINT_AVERAGED_FROM_KEY "relcl.averaged_from"

/* Write to out_path the element-wise mean (accumulated in double) of every tensor of
 * n >= 1 checkpoints, with the metadata of the last one plus "relcl.average_of" = n and
 * "relcl.averaged_from" = the paths (invalid UTF-8 bytes in them as '?').
 * Refused, naming the file and the tensor or key, when the tensor names or shapes differ
 * from the first checkpoint's, or when "relcl.config" differs (absent counts as a value).
 * out_path may be one of the inputs. Memory: about three times one checkpoint. */
relcl_status relcl_checkpoint_average(const char *const *paths, size_t n,
                                      const char *out_path);

#ifdef __cplusplus
}
#endif
#endif
