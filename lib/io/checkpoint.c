/* Checkpoint files: safetensors written atomically and read back strictly, with FNV-1a
 * checksums of the data and of the header (format in include/relcl_checkpoint.h), the
 * model-directory helpers of relcl-train and the averaging of relcl-average. Host only. */
#include "relcl_checkpoint.h"

#include "base.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define META_KEY "__metadata__"
#define FNV_BASIS 0xcbf29ce484222325ULL
/* The Python package refuses larger headers; refusing them too keeps files loadable. */
#define MAX_HEADER ((uint64_t)100000000)
/* The data is written (and, on a big-endian host, converted) in pieces of this size. */
#define CHUNK ((size_t)1 << 20)

/* Tests only: called after each piece of data reaches the temporary file, so a test can
 * kill the writer half-way. */
void (*relcl__checkpoint_write_hook)(size_t bytes_written);
void (*relcl__checkpoint_write_hook)(size_t bytes_written) = NULL;

/* A tensor as placed in a file. */
typedef struct entry {
  const char *name;
  int ndim;
  size_t shape[RELCL_CHECKPOINT_MAX_DIMS];
  size_t begin, end; /* byte offsets in the data section */
  size_t order;      /* position in the JSON (ties between empty tensors) */
  const float *data;
} entry;

struct relcl_checkpoint {
  char *path;
  unsigned char *file; /* the whole file, plus room to realign the data */
  cJSON *json;         /* names and metadata strings point into it */
  entry *tensor;       /* data order */
  size_t n_tensors;
  entry **by_name; /* sorted by name */
  relcl_checkpoint_meta *meta; /* sorted by key */
  size_t n_meta;
};

/* ---- small helpers ---- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  return relcl__fnv1a64(h, data, n);
}

static uint64_t fnv1a_str(uint64_t h, const char *s) { return fnv1a(h, s, strlen(s) + 1); }

static uint64_t fnv1a_size(uint64_t h, size_t v, char sep) {
  char buf[32];
  int k = snprintf(buf, sizeof buf, "%zu%c", v, sep);
  return fnv1a(h, buf, (size_t)k);
}

static bool host_little(void) {
  const uint32_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

static void swap4(unsigned char *dst, const unsigned char *src, size_t bytes) {
  for (size_t j = 0; j < bytes; j += 4) {
    unsigned char a = src[j], b = src[j + 1];
    dst[j] = src[j + 3];
    dst[j + 1] = src[j + 2];
    dst[j + 2] = b;
    dst[j + 3] = a;
  }
}

/* Element count of a shape, false when it or its byte size overflows. */
static bool shape_count(int ndim, const size_t *shape, size_t *count) {
  size_t c = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] != 0 && c > SIZE_MAX / 4 / shape[d]) return false;
    c *= shape[d];
  }
  *count = c;
  return true;
}

static const char *shape_str(int ndim, const size_t *shape, char *buf, size_t size) {
  size_t at = (size_t)snprintf(buf, size, "(");
  for (int d = 0; d < ndim && at < size; d++)
    at += (size_t)snprintf(buf + at, size - at, d ? ", %zu" : "%zu", shape[d]);
  if (at < size) snprintf(buf + at, size - at, ")");
  return buf;
}

/* RELCL_ERR_FORMAT (or another status) with "PATH: message". */
static relcl_status __attribute__((format(printf, 3, 4)))
fail_path(relcl_status st, const char *path, const char *fmt, ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return relcl__fail(st, "%s: %s", path, msg);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_meta(const void *a, const void *b) {
  return strcmp(((const relcl_checkpoint_meta *)a)->key, ((const relcl_checkpoint_meta *)b)->key);
}

static int cmp_entry_name(const void *a, const void *b) {
  return strcmp((*(entry *const *)a)->name, (*(entry *const *)b)->name);
}

static int cmp_entry_offset(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* The canonical header checksum (see the header file); meta sorted by key. */
static uint64_t header_hash(const entry *t, size_t nt, const relcl_checkpoint_meta *meta,
                            size_t nm) {
  uint64_t h = FNV_BASIS;
  for (size_t i = 0; i < nt; i++) {
    h = fnv1a_str(h, t[i].name);
    h = fnv1a_str(h, "F32");
    for (int d = 0; d < t[i].ndim; d++) h = fnv1a_size(h, t[i].shape[d], ',');
    h = fnv1a(h, "", 1);
    h = fnv1a_size(h, t[i].begin, ',');
    h = fnv1a_size(h, t[i].end, '\0');
  }
  h = fnv1a_str(h, META_KEY);
  for (size_t i = 0; i < nm; i++) {
    if (strcmp(meta[i].key, RELCL_CHECKPOINT_HEADER_HASH_KEY) == 0) continue;
    h = fnv1a_str(h, meta[i].key);
    h = fnv1a_str(h, meta[i].value);
  }
  return h;
}

/* Feed the data section, little-endian, to fn in pieces of at most CHUNK bytes. */
typedef relcl_status (*chunk_fn)(void *ud, const unsigned char *bytes, size_t n);

static relcl_status each_chunk(const entry *t, size_t nt, unsigned char *scratch, chunk_fn fn,
                               void *ud) {
  bool little = host_little();
  for (size_t i = 0; i < nt; i++) {
    const unsigned char *p = (const unsigned char *)t[i].data;
    size_t bytes = t[i].end - t[i].begin;
    for (size_t off = 0; off < bytes; off += CHUNK) {
      size_t k = bytes - off < CHUNK ? bytes - off : CHUNK;
      const unsigned char *src = p + off;
      if (!little) {
        swap4(scratch, src, k);
        src = scratch;
      }
      relcl_status st = fn(ud, src, k);
      if (st != RELCL_OK) return st;
    }
  }
  return RELCL_OK;
}

static relcl_status hash_chunk(void *ud, const unsigned char *bytes, size_t n) {
  uint64_t *h = ud;
  *h = fnv1a(*h, bytes, n);
  return RELCL_OK;
}

static relcl_status write_chunk(void *ud, const unsigned char *bytes, size_t n) {
  relcl__file_out *out = ud;
  if (!relcl__file_out_write(out, bytes, n)) return RELCL_ERR_IO;
  if (relcl__checkpoint_write_hook) relcl__checkpoint_write_hook(relcl__file_out_written(out));
  return RELCL_OK;
}

static bool utf8_valid(const unsigned char *s, size_t n, size_t *bad) {
  *bad = relcl__utf8_bad(s, n);
  return *bad == n;
}

static bool utf8_ok(const char *s) {
  size_t bad;
  return utf8_valid((const unsigned char *)s, strlen(s), &bad);
}

/* ---- writing ---- */

static relcl_status check_save_args(const char *path, const relcl_checkpoint_tensor *tensors,
                                    size_t nt, const relcl_checkpoint_meta *meta, size_t nm) {
  if (path == NULL || path[0] == '\0' || (nt > 0 && tensors == NULL) || (nm > 0 && meta == NULL))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_save: missing argument");
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  if (base[0] == '\0')
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: a checkpoint path must name a file", path);
  for (size_t i = 0; i < nt; i++) {
    const relcl_checkpoint_tensor *t = &tensors[i];
    size_t count;
    if (t->name == NULL || t->name[0] == '\0' || strcmp(t->name, META_KEY) == 0 ||
        !utf8_ok(t->name))
      return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: tensor %zu has no usable name", path, i);
    if (t->ndim < 0 || t->ndim > RELCL_CHECKPOINT_MAX_DIMS ||
        !shape_count(t->ndim, t->shape, &count))
      return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: tensor %s has an invalid shape", path,
                         t->name);
    if (count > 0 && t->data == NULL)
      return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: tensor %s has no data", path, t->name);
  }
  for (size_t i = 0; i < nm; i++) {
    if (meta[i].key == NULL || meta[i].value == NULL ||
        strcmp(meta[i].key, RELCL_CHECKPOINT_DATA_HASH_KEY) == 0 ||
        strcmp(meta[i].key, RELCL_CHECKPOINT_HEADER_HASH_KEY) == 0)
      return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: metadata entry %zu (%s) is not allowed",
                         path, i, meta[i].key ? meta[i].key : "NULL");
    if (!utf8_ok(meta[i].key) || !utf8_ok(meta[i].value))
      return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: metadata %s is not valid UTF-8", path,
                         meta[i].key);
  }
  return RELCL_OK;
}

static bool has_adjacent_dup(const char **sorted, size_t n, const char **dup) {
  for (size_t i = 1; i < n; i++)
    if (strcmp(sorted[i - 1], sorted[i]) == 0) {
      *dup = sorted[i];
      return true;
    }
  return false;
}

static cJSON *size_array(const size_t *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a != NULL && i < n; i++) {
    char buf[32];
    snprintf(buf, sizeof buf, "%zu", v[i]); /* exact, never 1e+15 */
    if (!cJSON_AddItemToArray(a, cJSON_CreateRaw(buf))) {
      cJSON_Delete(a);
      a = NULL;
    }
  }
  return a;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes past the length field. */
static char *header_json(const entry *t, size_t nt, const relcl_checkpoint_meta *meta,
                         size_t nm, size_t *len) {
  cJSON *root = cJSON_CreateObject(), *m = cJSON_CreateObject();
  bool ok = root && m && cJSON_AddItemToObject(root, META_KEY, m);
  if (!ok) cJSON_Delete(m);
  for (size_t i = 0; ok && i < nm; i++)
    ok = cJSON_AddItemToObject(m, meta[i].key, cJSON_CreateString(meta[i].value));
  for (size_t i = 0; ok && i < nt; i++) {
    cJSON *o = cJSON_CreateObject();
    size_t off[2] = {t[i].begin, t[i].end};
    ok = o && cJSON_AddItemToObject(root, t[i].name, o);
    if (!ok) cJSON_Delete(o);
    ok = ok && cJSON_AddItemToObject(o, "dtype", cJSON_CreateString("F32")) &&
         cJSON_AddItemToObject(o, "shape", size_array(t[i].shape, t[i].ndim)) &&
         cJSON_AddItemToObject(o, "data_offsets", size_array(off, 2));
  }
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (text == NULL) return NULL;
  size_t n = strlen(text), padded = n + (8 - (8 + n) % 8) % 8;
  char *out = realloc(text, padded + 1);
  if (out == NULL) {
    free(text);
    return NULL;
  }
  memset(out + n, ' ', padded - n);
  out[padded] = '\0';
  *len = padded;
  return out;
}

typedef struct file_parts {
  const char *header;
  size_t header_len;
  const entry *t;
  size_t nt;
  unsigned char *scratch;
} file_parts;

/* The file: length field, header, tensor data. */
static relcl_status write_parts(relcl__file_out *out, void *arg) {
  const file_parts *f = arg;
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)f->header_len >> (8 * i));
  if (relcl__file_out_write(out, len8, 8) && relcl__file_out_write(out, f->header, f->header_len))
    each_chunk(f->t, f->nt, f->scratch, write_chunk, out);
  return RELCL_OK; /* a failed write is reported by relcl__write_atomic */
}

relcl_status relcl_checkpoint_save(const char *path, const relcl_checkpoint_tensor *tensors,
                                   size_t n_tensors, const relcl_checkpoint_meta *meta,
                                   size_t n_meta) {
  relcl__clear_error();
  relcl_status st = check_save_args(path, tensors, n_tensors, meta, n_meta);
  if (st != RELCL_OK) return st;
  entry *t = calloc(n_tensors + 1, sizeof *t);
  relcl_checkpoint_meta *m = calloc(n_meta + 2, sizeof *m);
  const char **names = calloc(n_tensors + n_meta + 1, sizeof *names);
  unsigned char *scratch = host_little() ? NULL : malloc(CHUNK);
  char *header = NULL;
  size_t header_len = 0;
  st = RELCL_ERR_OUT_OF_MEMORY;
  if (t == NULL || m == NULL || names == NULL || (!host_little() && scratch == NULL)) {
    relcl__fail(st, "%s: out of memory", path);
    goto done;
  }

  size_t at = 0;
  for (size_t i = 0; i < n_tensors; i++) {
    size_t count = 0;
    shape_count(tensors[i].ndim, tensors[i].shape, &count);
    t[i].name = tensors[i].name;
    t[i].ndim = tensors[i].ndim;
    memcpy(t[i].shape, tensors[i].shape, sizeof t[i].shape);
    t[i].begin = at;
    at += 4 * count;
    t[i].end = at;
    t[i].order = i;
    t[i].data = tensors[i].data;
    names[i] = tensors[i].name;
  }
  const char *dup;
  qsort(names, n_tensors, sizeof *names, cmp_str);
  if (has_adjacent_dup(names, n_tensors, &dup)) {
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: two tensors are named %s", path, dup);
    goto done;
  }
  for (size_t i = 0; i < n_meta; i++) names[i] = meta[i].key;
  qsort(names, n_meta, sizeof *names, cmp_str);
  if (has_adjacent_dup(names, n_meta, &dup)) {
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: metadata key %s given twice", path, dup);
    goto done;
  }

  uint64_t data_hash = FNV_BASIS;
  each_chunk(t, n_tensors, scratch, hash_chunk, &data_hash);
  char data_hex[17], header_hex[17];
  snprintf(data_hex, sizeof data_hex, "%016" PRIx64, data_hash);
  if (n_meta > 0) memcpy(m, meta, n_meta * sizeof *m);
  m[n_meta].key = RELCL_CHECKPOINT_DATA_HASH_KEY;
  m[n_meta].value = data_hex;
  m[n_meta + 1].key = RELCL_CHECKPOINT_HEADER_HASH_KEY;
  m[n_meta + 1].value = header_hex;
  qsort(m, n_meta + 2, sizeof *m, cmp_meta);
  snprintf(header_hex, sizeof header_hex, "%016" PRIx64,
           header_hash(t, n_tensors, m, n_meta + 2));

  header = header_json(t, n_tensors, m, n_meta + 2, &header_len);
  if (header == NULL) {
    relcl__fail(st, "%s: out of memory building the header", path);
    goto done;
  }
  file_parts parts = {header, header_len, t, n_tensors, scratch};
  st = relcl__write_atomic(path, write_parts, &parts);
done:
  free(header);
  free(scratch);
  free(names);
  free(m);
  free(t);
  return st;
}

/* ---- reading ---- */

/* A non-negative integer below 2^53 (exact in a double). */
static bool json_size(const cJSON *v, size_t *out) {
  if (!cJSON_IsNumber(v)) return false;
  double d = v->valuedouble;
  if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return false;
  if ((uint64_t)d > SIZE_MAX) return false;
  *out = (size_t)d;
  return true;
}

/* A member name of obj that appears twice: 1 (*dup set), 0 (none) or -1 (out of memory).
 * Sorted, not compared pairwise: a header may name hundreds of thousands of tensors, and
 * n^2 / 2 comparisons of 200,000 names took minutes. */
static int dup_child(const cJSON *obj, const char **dup) {
  const char *small[16], **names = small;
  size_t n = 0;
  for (const cJSON *c = obj->child; c; c = c->next) n++;
  if (n > sizeof small / sizeof small[0] && (names = malloc(n * sizeof *names)) == NULL)
    return -1;
  n = 0;
  for (const cJSON *c = obj->child; c; c = c->next) names[n++] = c->string;
  qsort(names, n, sizeof *names, cmp_str);
  int found = has_adjacent_dup(names, n, dup);
  if (names != small) free(names);
  return found;
}

/* The first string of the JSON text s[0..n) holding a "\u0000" escape: cJSON keeps strings
 * NUL-terminated, so "emb.weight\u0000x" would load as a tensor named "emb.weight". Returns
 * false when there is none, else the string's start and the escape's offset. */
static bool escaped_nul(const char *s, size_t n, size_t *start, size_t *at) {
  bool in_string = false;
  for (size_t i = 0; i < n; i++) {
    if (!in_string) {
      if (s[i] == '"') {
        in_string = true;
        *start = i + 1;
      }
    } else if (s[i] == '"') {
      in_string = false;
    } else if (s[i] == '\\' && i + 1 < n) {
      if (s[i + 1] == 'u' && n - i >= 6 && memcmp(s + i + 2, "0000", 4) == 0) {
        *at = i;
        return true;
      }
      i++; /* the escaped character, which may be '"' or '\\' */
    }
  }
  return false;
}

static relcl_status parse_tensor(const char *path, const cJSON *o, entry *e) {
  const char *name = o->string, *dup;
  const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
  if (!cJSON_IsObject(o))
    return fail_path(RELCL_ERR_FORMAT, path, "tensor %s is not described by an object", name);
  int twice = dup_child(o, &dup);
  if (twice < 0) return fail_path(RELCL_ERR_OUT_OF_MEMORY, path, "out of memory");
  if (twice)
    return fail_path(RELCL_ERR_FORMAT, path, "tensor %s has field %s twice", name, dup);
  for (const cJSON *f = o->child; f; f = f->next) {
    if (strcmp(f->string, "dtype") == 0) dtype = f;
    else if (strcmp(f->string, "shape") == 0) shape = f;
    else if (strcmp(f->string, "data_offsets") == 0) offs = f;
    else
      return fail_path(RELCL_ERR_FORMAT, path, "tensor %s has an unknown field %s", name,
                       f->string);
  }
  if (!dtype || !shape || !offs)
    return fail_path(RELCL_ERR_FORMAT, path, "tensor %s lacks %s", name,
                     !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
  if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "F32") != 0)
    return fail_path(RELCL_ERR_FORMAT, path, "tensor %s has dtype %s; relcl reads F32 only", name,
                     cJSON_IsString(dtype) ? dtype->valuestring : "(not a string)");
  int nd = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
  if (nd < 0 || nd > RELCL_CHECKPOINT_MAX_DIMS)
    return fail_path(RELCL_ERR_FORMAT, path, "tensor %s: shape is not a list of at most %d sizes",
                     name, RELCL_CHECKPOINT_MAX_DIMS);
  e->name = name;
  e->ndim = nd;
  int d = 0;
  for (const cJSON *v = shape->child; v; v = v->next, d++)
    if (!json_size(v, &e->shape[d]))
      return fail_path(RELCL_ERR_FORMAT, path, "tensor %s: shape entry %d is not a size", name, d);
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
      !json_size(offs->child, &e->begin) || !json_size(offs->child->next, &e->end) ||
      e->end < e->begin)
    return fail_path(RELCL_ERR_FORMAT, path, "tensor %s: data_offsets is not [begin, end]", name);
  size_t count;
  char sh[256];
  if (!shape_count(nd, e->shape, &count))
    return fail_path(RELCL_ERR_FORMAT, path, "tensor %s: shape %s is too large", name,
                     shape_str(nd, e->shape, sh, sizeof sh));
  if (e->end - e->begin != 4 * count)
    return fail_path(RELCL_ERR_FORMAT, path,
                     "tensor %s: data_offsets [%zu, %zu] hold %zu bytes but shape %s of F32 "
                     "needs %zu",
                     name, e->begin, e->end, e->end - e->begin,
                     shape_str(nd, e->shape, sh, sizeof sh), 4 * count);
  return RELCL_OK;
}

static bool parse_hex64(const char *s, uint64_t *v) {
  if (strlen(s) != 16) return false;
  uint64_t x = 0;
  for (int i = 0; i < 16; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    x = x << 4 | (uint64_t)d;
  }
  *v = x;
  return true;
}

static relcl_status check_hash(relcl_checkpoint *ck, const char *key, uint64_t computed,
                               int flags) {
  const char *stored = relcl_checkpoint_meta_get(ck, key);
  uint64_t v;
  if (stored == NULL) {
    if (flags & RELCL_CHECKPOINT_FOREIGN) return RELCL_OK;
    return fail_path(RELCL_ERR_FORMAT, ck->path,
                     "no %s checksum in the metadata (damaged, or not written by relcl)", key);
  }
  if (!parse_hex64(stored, &v))
    return fail_path(RELCL_ERR_FORMAT, ck->path, "%s is not 16 hex digits: %s", key, stored);
  if (v != computed)
    return fail_path(RELCL_ERR_FORMAT, ck->path,
                     "%s checksum mismatch (stored %s, computed %016" PRIx64 "): the file is "
                     "corrupt",
                     strcmp(key, RELCL_CHECKPOINT_DATA_HASH_KEY) == 0 ? "data" : "header",
                     stored, computed);
  return RELCL_OK;
}

static relcl_status read_file(const char *path, unsigned char **buf, size_t *size) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return fail_path(RELCL_ERR_IO, path, "%s", strerror(errno));
  struct stat sb;
  relcl_status st = RELCL_OK;
  unsigned char *b = NULL;
  if (fstat(fd, &sb) != 0) {
    st = fail_path(RELCL_ERR_IO, path, "%s", strerror(errno));
  } else if (!S_ISREG(sb.st_mode)) {
    st = fail_path(RELCL_ERR_IO, path, "not a regular file");
  } else if ((uint64_t)sb.st_size > SIZE_MAX - 16 ||
             (b = malloc((size_t)sb.st_size + 16)) == NULL) {
    st = fail_path(RELCL_ERR_OUT_OF_MEMORY, path, "no memory for %lld bytes",
                   (long long)sb.st_size);
  } else {
    size_t n = (size_t)sb.st_size, got = 0;
    while (got < n) {
      ssize_t k = read(fd, b + got, n - got);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) {
        st = fail_path(RELCL_ERR_IO, path, "read failed: %s", strerror(errno));
        break;
      }
      if (k == 0) break; /* shrank under us: the checks below call it truncated */
      got += (size_t)k;
    }
    *size = got;
  }
  close(fd);
  if (st != RELCL_OK) {
    free(b);
    b = NULL;
  }
  *buf = b;
  return st;
}

relcl_status relcl_checkpoint_open(const char *path, int flags, relcl_checkpoint **out) {
  relcl__clear_error();
  if (out == NULL || path == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_open: missing argument");
  *out = NULL;
  relcl_checkpoint *ck = calloc(1, sizeof *ck);
  if (ck == NULL || (ck->path = strdup(path)) == NULL) {
    free(ck);
    return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  size_t size = 0;
  relcl_status st = read_file(path, &ck->file, &size);
  if (st != RELCL_OK) goto fail;

  st = RELCL_ERR_FORMAT;
  if (size < 8) {
    fail_path(st, path, "file too short (%zu bytes) for a safetensors header", size);
    goto fail;
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | ck->file[i];
  if (n > size - 8) {
    fail_path(st, path, "truncated: header length %" PRIu64 " runs past the end of the file "
                        "(%zu bytes)", n, size);
    goto fail;
  }
  if (n < 2 || n > MAX_HEADER) {
    fail_path(st, path, "header length %" PRIu64 " is out of range", n);
    goto fail;
  }
  const char *hdr = (const char *)ck->file + 8;
  size_t bad;
  if (hdr[0] != '{') {
    fail_path(st, path, "header does not start with '{'");
    goto fail;
  }
  if (memchr(hdr, '\0', (size_t)n) != NULL) {
    fail_path(st, path, "header contains a NUL byte");
    goto fail;
  }
  if (!utf8_valid((const unsigned char *)hdr, (size_t)n, &bad)) {
    fail_path(st, path, "header is not valid UTF-8 (byte %zu)", bad);
    goto fail;
  }
  size_t str_at = 0, nul_at = 0;
  if (escaped_nul(hdr, (size_t)n, &str_at, &nul_at)) {
    int keep = (int)(nul_at - str_at < 200 ? nul_at - str_at : 200);
    fail_path(st, path, "header string \"%.*s\\u0000...\" (byte %zu) has an escaped NUL; "
              "refused, it would read as \"%.*s\"", keep, hdr + str_at, nul_at, keep,
              hdr + str_at);
    goto fail;
  }
  const char *end = NULL;
  ck->json = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &end, 0);
  if (ck->json == NULL || !cJSON_IsObject(ck->json)) {
    fail_path(st, path, "header is not valid JSON (near byte %zu of %" PRIu64 ")",
              end ? (size_t)(end - hdr) : 0, n);
    goto fail;
  }
  for (; end < hdr + n; end++)
    if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
      fail_path(st, path, "header has bytes after its JSON object (byte %zu)",
                (size_t)(end - hdr));
      goto fail;
    }
  const char *dup;
  int twice = dup_child(ck->json, &dup);
  if (twice < 0) goto oom;
  if (twice) {
    fail_path(st, path, "header has %s twice", dup);
    goto fail;
  }

  /* The data follows the header; realign it when a foreign writer did not pad. */
  size_t data_len = size - 8 - (size_t)n;
  unsigned char *data = ck->file + 8 + n;
  if ((8 + n) % 8 != 0) {
    unsigned char *aligned = ck->file + ((8 + n + 7) / 8) * 8;
    memmove(aligned, data, data_len);
    data = aligned;
  }

  size_t count = (size_t)cJSON_GetArraySize(ck->json);
  ck->tensor = calloc(count + 1, sizeof *ck->tensor);
  ck->meta = calloc(1, sizeof *ck->meta);
  if (ck->tensor == NULL || ck->meta == NULL) goto oom;
  size_t order = 0;
  for (const cJSON *c = ck->json->child; c; c = c->next, order++) {
    if (strcmp(c->string, META_KEY) == 0) {
      if (!cJSON_IsObject(c)) {
        fail_path(st, path, "__metadata__ is not an object");
        goto fail;
      }
      if ((twice = dup_child(c, &dup)) < 0) goto oom;
      if (twice) {
        fail_path(st, path, "metadata key %s appears twice", dup);
        goto fail;
      }
      size_t nm = (size_t)cJSON_GetArraySize(c);
      free(ck->meta);
      if ((ck->meta = calloc(nm + 1, sizeof *ck->meta)) == NULL) goto oom;
      for (const cJSON *v = c->child; v; v = v->next) {
        if (!cJSON_IsString(v)) {
          fail_path(st, path, "metadata %s is not a string", v->string);
          goto fail;
        }
        ck->meta[ck->n_meta].key = v->string;
        ck->meta[ck->n_meta++].value = v->valuestring;
      }
      continue;
    }
    entry *e = &ck->tensor[ck->n_tensors++];
    if (parse_tensor(path, c, e) != RELCL_OK) goto fail;
    e->order = order;
    if (e->end > data_len) {
      fail_path(st, path, "truncated: tensor %s needs data bytes [%zu, %zu) but the file "
                          "holds %zu", e->name, e->begin, e->end, data_len);
      goto fail;
    }
  }

  qsort(ck->tensor, ck->n_tensors, sizeof *ck->tensor, cmp_entry_offset);
  size_t expect = 0;
  for (size_t i = 0; i < ck->n_tensors; i++) {
    entry *e = &ck->tensor[i];
    if (e->begin < expect) {
      fail_path(st, path, "tensors %s and %s overlap in the data", ck->tensor[i - 1].name,
                e->name);
      goto fail;
    }
    if (e->begin > expect) {
      fail_path(st, path, "%zu unused data bytes before tensor %s", e->begin - expect, e->name);
      goto fail;
    }
    expect = e->end;
    e->data = (const float *)(data + e->begin);
  }
  if (expect != data_len) {
    fail_path(st, path, "%zu bytes of trailing data after the last tensor", data_len - expect);
    goto fail;
  }

  ck->by_name = calloc(ck->n_tensors + 1, sizeof *ck->by_name);
  if (ck->by_name == NULL) goto oom;
  for (size_t i = 0; i < ck->n_tensors; i++) ck->by_name[i] = &ck->tensor[i];
  qsort(ck->by_name, ck->n_tensors, sizeof *ck->by_name, cmp_entry_name);
  qsort(ck->meta, ck->n_meta, sizeof *ck->meta, cmp_meta);

  /* Header first: a damaged data checksum entry is then reported as header damage. */
  st = check_hash(ck, RELCL_CHECKPOINT_HEADER_HASH_KEY,
                  header_hash(ck->tensor, ck->n_tensors, ck->meta, ck->n_meta), flags);
  if (st == RELCL_OK)
    st = check_hash(ck, RELCL_CHECKPOINT_DATA_HASH_KEY, fnv1a(FNV_BASIS, data, data_len),
                    flags);
  if (st != RELCL_OK) goto fail;
  if (!host_little()) swap4(data, data, data_len);
  *out = ck;
  return RELCL_OK;
oom:
  st = fail_path(RELCL_ERR_OUT_OF_MEMORY, path, "out of memory");
fail:
  relcl_checkpoint_close(ck);
  return st;
}

void relcl_checkpoint_close(relcl_checkpoint *ck) {
  if (ck == NULL) return;
  cJSON_Delete(ck->json);
  free(ck->by_name);
  free(ck->meta);
  free(ck->tensor);
  free(ck->file);
  free(ck->path);
  free(ck);
}

const char *relcl_checkpoint_path(const relcl_checkpoint *ck) { return ck->path; }

size_t relcl_checkpoint_tensor_count(const relcl_checkpoint *ck) { return ck->n_tensors; }

static relcl_checkpoint_tensor public_tensor(const entry *e) {
  relcl_checkpoint_tensor t;
  memset(&t, 0, sizeof t);
  t.name = e->name;
  t.ndim = e->ndim;
  memcpy(t.shape, e->shape, sizeof t.shape);
  t.data = e->data;
  return t;
}

relcl_checkpoint_tensor relcl_checkpoint_tensor_at(const relcl_checkpoint *ck, size_t i) {
  relcl_checkpoint_tensor t;
  if (i < ck->n_tensors) return public_tensor(&ck->tensor[i]);
  memset(&t, 0, sizeof t);
  return t;
}

static int cmp_name_key(const void *key, const void *elem) {
  return strcmp((const char *)key, (*(entry *const *)elem)->name);
}

relcl_status relcl_checkpoint_find(const relcl_checkpoint *ck, const char *name,
                                   relcl_checkpoint_tensor *out) {
  relcl__clear_error();
  if (ck == NULL || name == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_find: missing argument");
  entry *const *e = bsearch(name, ck->by_name, ck->n_tensors, sizeof *ck->by_name, cmp_name_key);
  if (e == NULL) return fail_path(RELCL_ERR_FORMAT, ck->path, "no tensor %s", name);
  *out = public_tensor(*e);
  return RELCL_OK;
}

relcl_status relcl_checkpoint_read(const relcl_checkpoint *ck, const char *name, int ndim,
                                   const size_t *shape, float *dst) {
  relcl__clear_error();
  relcl_checkpoint_tensor t;
  if (shape == NULL && ndim > 0)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_read: missing shape");
  relcl_status st = relcl_checkpoint_find(ck, name, &t);
  if (st != RELCL_OK) return st;
  bool same = t.ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = t.shape[d] == shape[d];
  if (!same) {
    char a[256], b[256];
    return fail_path(RELCL_ERR_FORMAT, ck->path, "tensor %s has shape %s, expected %s", name,
                     shape_str(t.ndim, t.shape, a, sizeof a), shape_str(ndim, shape, b, sizeof b));
  }
  size_t count = 0;
  shape_count(t.ndim, t.shape, &count);
  if (count > 0) {
    if (dst == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_read: no dst");
    memcpy(dst, t.data, count * sizeof *dst);
  }
  return RELCL_OK;
}

const char *relcl_checkpoint_meta_get(const relcl_checkpoint *ck, const char *key) {
  relcl_checkpoint_meta k = {key, NULL};
  const relcl_checkpoint_meta *m = bsearch(&k, ck->meta, ck->n_meta, sizeof k, cmp_meta);
  return m ? m->value : NULL;
}

size_t relcl_checkpoint_meta_count(const relcl_checkpoint *ck) { return ck->n_meta; }

relcl_checkpoint_meta relcl_checkpoint_meta_at(const relcl_checkpoint *ck, size_t i) {
  relcl_checkpoint_meta m = {NULL, NULL};
  return i < ck->n_meta ? ck->meta[i] : m;
}

/* ---- model directories ---- */

static const char step_suffix[] = ".safetensors";

/* "ckpt-" digits ".safetensors": at least 8 digits, no leading zero beyond the padding. */
static bool parse_step_name(const char *name, uint64_t *step) {
  if (strncmp(name, "ckpt-", 5) != 0) return false;
  const char *p = name + 5;
  size_t nd = 0;
  uint64_t v = 0;
  while (p[nd] >= '0' && p[nd] <= '9') {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + (uint64_t)(p[nd] - '0');
    nd++;
  }
  if (nd < 8 || (nd > 8 && p[0] == '0') || strcmp(p + nd, step_suffix) != 0) return false;
  *step = v;
  return true;
}

relcl_status relcl_checkpoint_step_path(const char *dir, uint64_t step, char *buf,
                                        size_t size) {
  relcl__clear_error();
  if (dir == NULL || buf == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_step_path: missing argument");
  int k = snprintf(buf, size, "%s/ckpt-%08" PRIu64 "%s", dir[0] ? dir : ".", step, step_suffix);
  if (k < 0 || (size_t)k >= size)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: checkpoint path too long", dir);
  return RELCL_OK;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

typedef struct step_path {
  uint64_t step;
  char *path;
} step_path;

static int cmp_step(const void *a, const void *b) {
  uint64_t x = ((const step_path *)a)->step, y = ((const step_path *)b)->step;
  return x < y ? -1 : x > y;
}

void relcl_checkpoint_list_free(relcl_checkpoint_list *list) {
  if (list == NULL) return;
  for (size_t i = 0; list->paths && i < list->count; i++) free(list->paths[i]);
  free(list->paths);
  free(list->steps);
  free(list->best);
  memset(list, 0, sizeof *list);
}

relcl_status relcl_checkpoint_list_dir(const char *dir, relcl_checkpoint_list *out) {
  relcl__clear_error();
  if (dir == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_list_dir: missing argument");
  memset(out, 0, sizeof *out);
  DIR *d = opendir(dir);
  if (d == NULL) return fail_path(RELCL_ERR_IO, dir, "%s", strerror(errno));
  step_path *sp = NULL;
  size_t n = 0, cap = 0;
  relcl_status st = RELCL_OK;
  struct dirent *de;
  errno = 0;
  while (st == RELCL_OK && (de = readdir(d)) != NULL) {
    uint64_t step;
    if (strcmp(de->d_name, RELCL_CHECKPOINT_BEST_NAME) == 0) {
      if (out->best == NULL && (out->best = join(dir, de->d_name)) == NULL)
        st = RELCL_ERR_OUT_OF_MEMORY;
    } else if (parse_step_name(de->d_name, &step)) {
      if (n == cap) {
        cap = cap ? 2 * cap : 16;
        step_path *grown = realloc(sp, cap * sizeof *sp);
        if (grown == NULL) {
          st = RELCL_ERR_OUT_OF_MEMORY;
          break;
        }
        sp = grown;
      }
      sp[n].step = step;
      if ((sp[n].path = join(dir, de->d_name)) == NULL) st = RELCL_ERR_OUT_OF_MEMORY;
      else n++;
    }
    errno = 0;
  }
  if (st == RELCL_OK && errno != 0) st = fail_path(RELCL_ERR_IO, dir, "%s", strerror(errno));
  closedir(d);
  if (st == RELCL_OK) {
    if (n > 1) qsort(sp, n, sizeof *sp, cmp_step);
    out->steps = calloc(n + 1, sizeof *out->steps);
    out->paths = calloc(n + 1, sizeof *out->paths);
    if (out->steps == NULL || out->paths == NULL) st = RELCL_ERR_OUT_OF_MEMORY;
  }
  if (st == RELCL_OK) {
    for (size_t i = 0; i < n; i++) {
      out->steps[i] = sp[i].step;
      out->paths[i] = sp[i].path;
    }
    out->count = n;
  } else {
    for (size_t i = 0; i < n; i++) free(sp[i].path);
    if (st == RELCL_ERR_OUT_OF_MEMORY) fail_path(st, dir, "out of memory listing checkpoints");
    relcl_checkpoint_list_free(out);
  }
  free(sp);
  return st;
}

relcl_status relcl_checkpoint_keep_last(const char *dir, size_t keep) {
  relcl__clear_error();
  if (keep == 0)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_keep_last: keep must be >= 1");
  relcl_checkpoint_list list;
  relcl_status st = relcl_checkpoint_list_dir(dir, &list);
  for (size_t i = 0; st == RELCL_OK && i + keep < list.count; i++)
    if (unlink(list.paths[i]) != 0 && errno != ENOENT)
      st = fail_path(RELCL_ERR_IO, list.paths[i], "cannot delete: %s", strerror(errno));
  relcl_checkpoint_list_free(&list);
  return st;
}

/* ".NAME.safetensors.tmp-XXXXXX", as write_atomic names them. */
static bool is_temp_name(const char *name) {
  static const char mark[] = ".safetensors.tmp-";
  const char *p = strstr(name, mark);
  return name[0] == '.' && p != NULL && p > name + 1 && strlen(p + sizeof mark - 1) == 6 &&
         strstr(p + 1, mark) == NULL;
}

relcl_status relcl_checkpoint_dir_clean(const char *dir, size_t *removed) {
  relcl__clear_error();
  if (removed) *removed = 0;
  if (dir == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_dir_clean: no dir");
  DIR *d = opendir(dir);
  if (d == NULL) return fail_path(RELCL_ERR_IO, dir, "%s", strerror(errno));
  relcl_status st = RELCL_OK;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!is_temp_name(de->d_name)) continue;
    char *p = join(dir, de->d_name);
    if (p == NULL) {
      st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
      break;
    }
    if (unlink(p) == 0) {
      if (removed) (*removed)++;
    } else if (errno != ENOENT && st == RELCL_OK) {
      st = fail_path(RELCL_ERR_IO, p, "cannot delete: %s", strerror(errno));
    }
    free(p);
  }
  closedir(d);
  return st;
}

static bool append_line(char **text, size_t *len, const char *line) {
  size_t k = strlen(line);
  char *grown = realloc(*text, *len + k + 2);
  if (grown == NULL) return false;
  memcpy(grown + *len, line, k);
  grown[*len + k] = '\n';
  grown[*len + k + 1] = '\0';
  *text = grown;
  *len += k + 1;
  return true;
}

relcl_status relcl_checkpoint_open_latest(const char *dir, relcl_checkpoint **out,
                                          char **skipped) {
  relcl__clear_error();
  if (skipped) *skipped = NULL;
  if (out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_open_latest: missing argument");
  *out = NULL;
  relcl_checkpoint_list list;
  relcl_status st = relcl_checkpoint_list_dir(dir, &list);
  if (st != RELCL_OK) return st;
  char *text = NULL, last[1024] = "";
  size_t len = 0;
  st = fail_path(RELCL_ERR_IO, dir, "no checkpoint (ckpt-*.safetensors)");
  for (size_t i = list.count; i-- > 0;) {
    st = relcl_checkpoint_open(list.paths[i], 0, out);
    if (st == RELCL_OK || (st != RELCL_ERR_FORMAT && st != RELCL_ERR_IO)) break;
    snprintf(last, sizeof last, "%s", relcl_last_error());
    if (!append_line(&text, &len, last)) {
      st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
      break;
    }
  }
  if (st == RELCL_ERR_FORMAT || (st == RELCL_ERR_IO && list.count > 0))
    st = fail_path(RELCL_ERR_FORMAT, dir, "no valid checkpoint among %zu; oldest: %s",
                   list.count, last);
  relcl_checkpoint_list_free(&list);
  if (skipped && st == RELCL_OK) *skipped = text;
  else free(text);
  return st;
}

/* ---- averaging ---- */

typedef struct avg_tensor {
  char *name;
  int ndim;
  size_t shape[RELCL_CHECKPOINT_MAX_DIMS];
  size_t offset, count; /* in elements of the flat accumulator */
} avg_tensor;

/* Two relcl.config values describe the same model: equal as JSON (key order and spacing
 * aside: checkpoints written before the configuration went through cJSON are spaced), or
 * both absent. */
static bool same_config(const char *a, const char *b) {
  if (a == NULL || b == NULL) return a == b;
  if (strcmp(a, b) == 0) return true;
  cJSON *ja = cJSON_Parse(a), *jb = cJSON_Parse(b);
  bool same = ja && jb && cJSON_Compare(ja, jb, true);
  cJSON_Delete(ja);
  cJSON_Delete(jb);
  return same;
}

/* Check that ck has exactly the tensors of table (names and shapes) and the same config. */
static relcl_status avg_match(const relcl_checkpoint *ck, const avg_tensor *table, size_t nt,
                              const char *first, const char *config) {
  for (size_t i = 0; i < nt; i++) {
    relcl_checkpoint_tensor t;
    if (relcl_checkpoint_find(ck, table[i].name, &t) != RELCL_OK)
      return fail_path(RELCL_ERR_FORMAT, ck->path, "no tensor %s, which %s has; not averaged",
                       table[i].name, first);
    bool same = t.ndim == table[i].ndim;
    for (int d = 0; same && d < t.ndim; d++) same = t.shape[d] == table[i].shape[d];
    if (!same) {
      char a[256], b[256];
      return fail_path(RELCL_ERR_FORMAT, ck->path,
                       "tensor %s has shape %s but %s has %s; not averaged", t.name,
                       shape_str(t.ndim, t.shape, a, sizeof a), first,
                       shape_str(table[i].ndim, table[i].shape, b, sizeof b));
    }
  }
  if (ck->n_tensors != nt) /* every name of table was found, so ck has more */
    for (size_t i = 0; i < ck->n_tensors; i++) {
      bool known = false;
      for (size_t j = 0; !known && j < nt; j++)
        known = strcmp(ck->tensor[i].name, table[j].name) == 0;
      if (!known)
        return fail_path(RELCL_ERR_FORMAT, ck->path, "tensor %s is not in %s; not averaged",
                         ck->tensor[i].name, first);
    }
  if (!same_config(relcl_checkpoint_meta_get(ck, RELCL_CHECKPOINT_CONFIG_KEY), config))
    return fail_path(RELCL_ERR_FORMAT, ck->path,
                     "%s differs from that of %s (another configuration); not averaged",
                     RELCL_CHECKPOINT_CONFIG_KEY, first);
  return RELCL_OK;
}

/* The inputs as a JSON array of strings, a metadata value (so valid UTF-8: other bytes of a
 * path become '?'); NULL when out of memory. */
static char *averaged_from(const char *const *paths, size_t n) {
  cJSON *a = cJSON_CreateArray();
  char *text = NULL;
  for (size_t i = 0; a != NULL && i < n; i++) {
    char *p = strdup(paths[i]);
    if (p == NULL) goto done;
    size_t len = strlen(p), at = 0, bad;
    while ((bad = at + relcl__utf8_bad((unsigned char *)p + at, len - at)) < len) {
      p[bad] = '?';
      at = bad + 1;
    }
    bool ok = cJSON_AddItemToArray(a, cJSON_CreateString(p));
    free(p);
    if (!ok) goto done;
  }
  text = a ? cJSON_PrintUnformatted(a) : NULL;
done:
  cJSON_Delete(a);
  return text;
}

relcl_status relcl_checkpoint_average(const char *const *paths, size_t n,
                                      const char *out_path) {
  relcl__clear_error();
  if (paths == NULL || n == 0 || out_path == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_average: nothing to average");
  for (size_t i = 0; i < n; i++)
    if (paths[i] == NULL)
      return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_checkpoint_average: path %zu is NULL", i);

  relcl_checkpoint *ck = NULL;
  avg_tensor *table = NULL;
  size_t nt = 0, total = 0, nm = 0;
  double *acc = NULL;
  float *avg = NULL;
  char *config = NULL, *from = NULL, count_text[32];
  relcl_checkpoint_meta *meta = NULL;
  relcl_checkpoint_tensor *out = NULL;

  relcl_status st = relcl_checkpoint_open(paths[0], 0, &ck);
  if (st != RELCL_OK) goto done;
  nt = ck->n_tensors;
  table = calloc(nt + 1, sizeof *table);
  if (table == NULL) goto oom;
  for (size_t i = 0; i < nt; i++) {
    const entry *e = &ck->tensor[i];
    if ((table[i].name = strdup(e->name)) == NULL) goto oom;
    table[i].ndim = e->ndim;
    memcpy(table[i].shape, e->shape, sizeof e->shape);
    table[i].offset = total;
    table[i].count = (e->end - e->begin) / 4;
    total += table[i].count;
  }
  const char *c0 = relcl_checkpoint_meta_get(ck, RELCL_CHECKPOINT_CONFIG_KEY);
  if (c0 && (config = strdup(c0)) == NULL) goto oom;
  if ((acc = malloc((total + 1) * sizeof *acc)) == NULL) goto oom;

  for (size_t k = 0; k < n; k++) {
    if (k > 0) {
      relcl_checkpoint_close(ck);
      ck = NULL;
      if ((st = relcl_checkpoint_open(paths[k], 0, &ck)) != RELCL_OK) goto done;
      if ((st = avg_match(ck, table, nt, paths[0], config)) != RELCL_OK) goto done;
    }
    for (size_t i = 0; i < nt; i++) {
      relcl_checkpoint_tensor t;
      relcl_checkpoint_find(ck, table[i].name, &t);
      double *a = acc + table[i].offset;
      if (k == 0) /* not 0 + x: the mean of -0 values stays -0 */
        for (size_t j = 0; j < table[i].count; j++) a[j] = t.data[j];
      else
        for (size_t j = 0; j < table[i].count; j++) a[j] += t.data[j];
    }
  }

  /* Metadata of the last checkpoint, less what save adds itself; then free its data. */
  meta = calloc(ck->n_meta + 2, sizeof *meta);
  if (meta == NULL) goto oom;
  for (size_t i = 0; i < ck->n_meta; i++) {
    const relcl_checkpoint_meta *m = &ck->meta[i];
    if (strcmp(m->key, RELCL_CHECKPOINT_DATA_HASH_KEY) == 0 ||
        strcmp(m->key, RELCL_CHECKPOINT_HEADER_HASH_KEY) == 0 || strcmp(m->key, RELCL_CHECKPOINT_AVERAGE_KEY) == 0 ||
        strcmp(m->key, RELCL_CHECKPOINT_AVERAGED_FROM_KEY) == 0)
      continue;
    meta[nm].key = strdup(m->key);
    meta[nm].value = strdup(m->value);
    if (meta[nm].key == NULL || meta[nm].value == NULL) {
      nm++;
      goto oom;
    }
    nm++;
  }
  relcl_checkpoint_close(ck);
  ck = NULL;
  snprintf(count_text, sizeof count_text, "%zu", n);
  meta[nm].key = RELCL_CHECKPOINT_AVERAGE_KEY;
  meta[nm].value = count_text;
  if ((from = averaged_from(paths, n)) == NULL) goto oom;
  meta[nm + 1].key = RELCL_CHECKPOINT_AVERAGED_FROM_KEY;
  meta[nm + 1].value = from;

  avg = malloc((total + 1) * sizeof *avg);
  out = calloc(nt + 1, sizeof *out);
  if (avg == NULL || out == NULL) goto oom;
  for (size_t i = 0; i < total; i++) avg[i] = (float)(acc[i] / (double)n);
  for (size_t i = 0; i < nt; i++) {
    out[i].name = table[i].name;
    out[i].ndim = table[i].ndim;
    memcpy(out[i].shape, table[i].shape, sizeof out[i].shape);
    out[i].data = avg + table[i].offset;
  }
  st = relcl_checkpoint_save(out_path, out, nt, meta, nm + 2);
  goto done;
oom:
  st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory averaging checkpoints", out_path);
done:
  relcl_checkpoint_close(ck);
  for (size_t i = 0; meta && i < nm; i++) {
    free((char *)meta[i].key);
    free((char *)meta[i].value);
  }
  free(meta);
  for (size_t i = 0; table && i < nt; i++) free(table[i].name);
  free(table);
  free(out);
  free(avg);
  free(acc);
  free(config);
  free(from);
  return st;
}
