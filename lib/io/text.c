/* Validated text files, plain or xz: relcl_text (relcl_data.h). The corpus (data.c) and
 * SentencePiece training (spm.cc) both read through it. */
#include "base.h"
#include "relcl_data.h"

#include <errno.h>
#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- whole files, xz or plain ---------------------------------------------------------- */

static relcl_status read_raw(const char *path, unsigned char **out, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return relcl__fail(RELCL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  relcl_status st = RELCL_OK;
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  if (buf == NULL) goto oom;
  for (;;) {
    if (n == cap) {
      unsigned char *b = realloc(buf, cap * 2);
      if (b == NULL) goto oom;
      buf = b;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    st = relcl__fail(RELCL_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    goto fail;
  }
  fclose(f);
  *out = buf;
  *size = n;
  return RELCL_OK;
oom:
  st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory reading the file", path);
fail:
  free(buf);
  fclose(f);
  return st;
}

static int is_xz(const unsigned char *p, size_t n) {
  static const unsigned char magic[6] = {0xFD, '7', 'z', 'X', 'Z', 0x00};
  return n >= sizeof magic && memcmp(p, magic, sizeof magic) == 0;
}

static relcl_status unxz(const char *path, const unsigned char *in, size_t n, unsigned char **out,
                         size_t *size) {
  lzma_stream strm = LZMA_STREAM_INIT;
  relcl_status st = RELCL_OK;
  size_t cap = n * 4 + 4096;
  unsigned char *buf = malloc(cap);
  if (buf == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
  lzma_ret r = lzma_stream_decoder(&strm, UINT64_MAX, LZMA_CONCATENATED);
  if (r != LZMA_OK) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: cannot start the xz decoder (%d)", path, (int)r);
    goto fail;
  }
  strm.next_in = in;
  strm.avail_in = n;
  for (;;) {
    if (strm.total_out == cap) {
      unsigned char *b = realloc(buf, cap * 2);
      if (b == NULL) {
        st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory decompressing", path);
        goto fail;
      }
      buf = b;
      cap *= 2;
    }
    strm.next_out = buf + strm.total_out;
    strm.avail_out = cap - (size_t)strm.total_out;
    r = lzma_code(&strm, LZMA_FINISH);
    if (r == LZMA_STREAM_END) break;
    if ((r == LZMA_OK || r == LZMA_BUF_ERROR) && strm.avail_out == 0) continue;
    if (r == LZMA_MEM_ERROR) {
      st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory decompressing", path);
    } else if (r == LZMA_BUF_ERROR || r == LZMA_OK) {
      st = relcl__fail(RELCL_ERR_FORMAT, "%s: truncated xz data (after %llu bytes of text)", path,
                       (unsigned long long)strm.total_out);
    } else {
      st = relcl__fail(RELCL_ERR_FORMAT, "%s: corrupt xz data (liblzma error %d)", path, (int)r);
    }
    goto fail;
  }
  *size = (size_t)strm.total_out;
  lzma_end(&strm);
  *out = buf;
  return RELCL_OK;
fail:
  lzma_end(&strm);
  free(buf);
  return st;
}

/* ---- text ------------------------------------------------------------------------------ */

struct relcl_text {
  char *buf; /* every line, each NUL-terminated in place */
  size_t n;
  size_t *start; /* (n) */
  size_t *len;   /* (n) */
};

relcl_status relcl_text_read(relcl_text **out, const char *path) {
  relcl__clear_error();
  if (out == NULL || path == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "text_read: out and path must not be NULL");
  *out = NULL;
  unsigned char *raw = NULL, *data = NULL;
  size_t nraw = 0, n = 0;
  relcl_text *t = NULL;
  relcl_status st = read_raw(path, &raw, &nraw);
  if (st != RELCL_OK) return st;
  if (is_xz(raw, nraw)) {
    st = unxz(path, raw, nraw, &data, &n);
    free(raw);
    raw = NULL;
    if (st != RELCL_OK) return st;
  } else {
    data = raw;
    n = nraw;
    raw = NULL;
  }
  /* room for the NUL after a last line that has no '\n' */
  unsigned char *grown = realloc(data, n + 1);
  if (grown == NULL) goto oom;
  data = grown;
  data[n] = '\0';

  size_t begin = 0;
  if (n >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF) begin = 3;
  size_t lines = 0;
  for (size_t i = begin; i < n; i++) lines += data[i] == '\n';
  if (n > begin && data[n - 1] != '\n') lines++;

  t = calloc(1, sizeof *t);
  if (t == NULL) goto oom;
  t->buf = (char *)data;
  data = NULL;
  t->start = malloc((lines ? lines : 1) * sizeof *t->start);
  t->len = malloc((lines ? lines : 1) * sizeof *t->len);
  if (t->start == NULL || t->len == NULL) goto oom;

  unsigned char *p = (unsigned char *)t->buf;
  size_t pos = begin;
  for (size_t l = 0; l < lines; l++) {
    unsigned char *nl = memchr(p + pos, '\n', n - pos);
    size_t end = nl ? (size_t)(nl - p) : n;
    size_t len = end - pos;
    p[end] = '\0';
    unsigned char *z = memchr(p + pos, '\0', len);
    if (z != NULL) {
      st = relcl__fail(RELCL_ERR_FORMAT, "%s:%zu: NUL byte at column %zu", path, l + 1,
                       (size_t)(z - (p + pos)) + 1);
      goto fail;
    }
    if (len > 0 && p[end - 1] == '\r') {
      p[end - 1] = '\0';
      len--;
    }
    size_t bad = relcl__utf8_bad(p + pos, len);
    if (bad < len) {
      st = relcl__fail(RELCL_ERR_FORMAT, "%s:%zu: invalid UTF-8 (byte 0x%02X at column %zu)", path,
                       l + 1, p[pos + bad], bad + 1);
      goto fail;
    }
    t->start[l] = pos;
    t->len[l] = len;
    pos = end + 1;
  }
  t->n = lines;
  *out = t;
  return RELCL_OK;
oom:
  st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
fail:
  free(data);
  relcl_text_destroy(t);
  return st;
}

void relcl_text_destroy(relcl_text *text) {
  if (text == NULL) return;
  free(text->buf);
  free(text->start);
  free(text->len);
  free(text);
}

size_t relcl_text_count(const relcl_text *text) { return text ? text->n : 0; }

const char *relcl_text_line(const relcl_text *text, size_t i, size_t *len) {
  if (text == NULL || i >= text->n) {
    if (len) *len = 0;
    return NULL;
  }
  if (len) *len = text->len[i];
  return text->buf + text->start[i];
}

int relcl_text_blank(const relcl_text *text, size_t i) {
  size_t len;
  const char *s = relcl_text_line(text, i, &len);
  if (s == NULL) return 1;
  for (size_t k = 0; k < len; k++)
    if (s[k] != ' ' && s[k] != '\t') return 0;
  return 1;
}
