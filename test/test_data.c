/* The data layer: every bad input gets its error ("FILE:LINE: ..."), xz is read as plain
 * text, SentencePiece trains deterministically and round-trips the corpus, and the batcher
 * keeps its invariants (each pair once per epoch, the token budget, the seeded order that
 * relcl_data.h specifies, exact resume). Needs no OpenCL device.
 *
 * The bundled corpus is found through RELCL_DATA_DIR (meson sets it), else RELCL_TEST_DATA_DIR
 * given at compile time. */
#include "relcl_data.h"
#include "testutil.h"

#include <lzma.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what) {
  fprintf(stderr, "test_data: %s: %s\n", what, relcl_last_error());
  exit(2);
}

/* ---- scratch files ---- */

static char tmpdir[512];
static char *made[64];
static int n_made;

static const char *tmp_path(const char *name) {
  static char buf[8][1024];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 1024, "%s/%s", tmpdir, name);
  int known = 0;
  for (int i = 0; i < n_made; i++) known |= strcmp(made[i], p) == 0;
  if (!known && n_made < 64) made[n_made++] = strdup(p);
  return p;
}

static const char *write_file(const char *name, const void *bytes, size_t n) {
  const char *p = tmp_path(name);
  FILE *f = fopen(p, "wb");
  if (f == NULL || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "test_data: cannot write %s\n", p);
    exit(2);
  }
  return p;
}

static const char *write_text(const char *name, const char *text) {
  return write_file(name, text, strlen(text));
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  size_t cap = 1 << 16, len = 0, got;
  char *b = malloc(cap);
  while (b && (got = fread(b + len, 1, cap - len, f)) > 0) {
    len += got;
    if (len == cap) b = realloc(b, cap *= 2);
  }
  fclose(f);
  *n = len;
  return b;
}

static void cleanup(void) {
  for (int i = 0; i < n_made; i++) {
    unlink(made[i]);
    free(made[i]);
  }
  rmdir(tmpdir);
}

static const char *data_dir(void) {
  const char *d = getenv("RELCL_DATA_DIR");
  if (d && *d) return d;
#ifdef RELCL_TEST_DATA_DIR
  return RELCL_TEST_DATA_DIR;
#else
  return "data";
#endif
}

static const char *corpus_file(const char *name) {
  static char buf[4][1024];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 1024, "%s/gettext-en-fr/%s", data_dir(), name);
  return p;
}

/* Does the last error start with "PATH:LINE: " and mention `what`? */
static int error_at(const char *path, int line, const char *what) {
  char want[1100];
  if (line > 0)
    snprintf(want, sizeof want, "%s:%d: ", path, line);
  else
    snprintf(want, sizeof want, "%s: ", path);
  const char *e = relcl_last_error();
  return strncmp(e, want, strlen(want)) == 0 && strstr(e, what) != NULL;
}

static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

/* ---- text files ---- */

static void test_text(void) {
  relcl_text *t = NULL;
  const char *p = write_text("basic.txt", "\xEF\xBB\xBF"
                                          "first\r\nsecond \xC3\xA9\xE2\x82\xAC"
                                          "\xF0\x9D\x84\x9E\n\n \t\nlast");
  relcl_status st = relcl_text_read(&t, p);
  if (tu_check(st == RELCL_OK, "text: BOM, CRLF, 2-4 byte UTF-8, no final newline read")) {
    size_t len;
    tu_check(relcl_text_count(t) == 5, "text: 5 lines (got %zu)", relcl_text_count(t));
    tu_check(strcmp(relcl_text_line(t, 0, &len), "first") == 0 && len == 5,
          "text: BOM and CR dropped from line 1");
    tu_check(strcmp(relcl_text_line(t, 1, NULL), "second \xC3\xA9\xE2\x82\xAC\xF0\x9D\x84\x9E") == 0,
          "text: multi-byte line kept as is");
    tu_check(relcl_text_blank(t, 2) && relcl_text_blank(t, 3) && !relcl_text_blank(t, 4),
          "text: empty and space/tab lines are blank");
    tu_check(strcmp(relcl_text_line(t, 4, NULL), "last") == 0, "text: last line without newline");
    tu_check(relcl_text_line(t, 5, NULL) == NULL, "text: line past the end is NULL");
  }
  relcl_text_destroy(t);
  t = NULL;
  st = relcl_text_read(&t, write_text("empty.txt", ""));
  tu_check(st == RELCL_OK && relcl_text_count(t) == 0, "text: empty file has 0 lines");
  relcl_text_destroy(t);
  t = NULL;
  st = relcl_text_read(&t, write_text("nl.txt", "\n"));
  tu_check(st == RELCL_OK && relcl_text_count(t) == 1 && relcl_text_blank(t, 0),
        "text: a lone newline is one empty line");
  relcl_text_destroy(t);
  relcl_text_destroy(NULL);
}

static void test_bad_utf8(void) {
  static const struct {
    const char *name, *bytes;
  } bad[] = {
      {"byte FF", "\xFF"},
      {"lone continuation", "\x80"},
      {"overlong 2-byte", "\xC0\x80"},
      {"overlong 3-byte", "\xE0\x80\xAF"},
      {"overlong 4-byte", "\xF0\x80\x80\xAF"},
      {"surrogate", "\xED\xA0\x80"},
      {"past U+10FFFF", "\xF4\x90\x80\x80"},
      {"truncated at end of line", "\xE2\x82"},
      {"truncated before ASCII", "\xE2\x82x"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[128];
    snprintf(text, sizeof text, "one\ntwo\nthree %s here\nfour\n", bad[i].bytes);
    const char *p = write_text("bad_utf8.txt", text);
    relcl_text *t = NULL;
    relcl_status st = relcl_text_read(&t, p);
    tu_check(st == RELCL_ERR_FORMAT && t == NULL && error_at(p, 3, "invalid UTF-8"),
          "bad UTF-8 (%s) on line 3: %s", bad[i].name, relcl_last_error());
    relcl_text_destroy(t);
  }
  static const char nul[] = "ok line\nbad\0line\nthird\n";
  const char *p = write_file("nul.txt", nul, sizeof nul - 1);
  relcl_text *t = NULL;
  relcl_status st = relcl_text_read(&t, p);
  tu_check(st == RELCL_ERR_FORMAT && error_at(p, 2, "NUL byte"), "NUL byte on line 2: %s",
        relcl_last_error());
  relcl_text_destroy(t);
  const char *missing = tmp_path("does-not-exist.en");
  st = relcl_text_read(&t, missing);
  tu_check(st == RELCL_ERR_IO && error_at(missing, 0, "cannot open"), "missing file: %s",
        relcl_last_error());
}

static void test_xz(void) {
  const char *plain = "alpha\nbeta \xC3\xA9t\xC3\xA9\n\ngamma\n";
  size_t n = strlen(plain), cap = n + 1024, out = 0;
  unsigned char *xz = malloc(cap);
  if (lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, NULL, (const uint8_t *)plain, n, xz, &out,
                              cap) != LZMA_OK)
    die("lzma_easy_buffer_encode");
  /* the name says nothing: the magic bytes decide */
  const char *p = write_file("packed.txt", xz, out);
  relcl_text *t = NULL;
  relcl_status st = relcl_text_read(&t, p);
  tu_check(st == RELCL_OK && relcl_text_count(t) == 4 &&
            strcmp(relcl_text_line(t, 1, NULL), "beta \xC3\xA9t\xC3\xA9") == 0 &&
            relcl_text_blank(t, 2),
        "xz: decompressed by its magic bytes, lines as in the plain text");
  relcl_text_destroy(t);
  t = NULL;
  p = write_file("truncated.xz", xz, out / 2);
  st = relcl_text_read(&t, p);
  tu_check(st == RELCL_ERR_FORMAT && error_at(p, 0, "xz"), "xz: truncated file: %s",
        relcl_last_error());
  xz[out / 2] ^= 0x55;
  p = write_file("corrupt.xz", xz, out);
  st = relcl_text_read(&t, p);
  tu_check(st == RELCL_ERR_FORMAT && error_at(p, 0, "xz"), "xz: corrupt file: %s", relcl_last_error());
  free(xz);
}

/* The bundled corpus: every file reads, counts as documented, no empty line. */
static void test_bundled(void) {
  static const struct {
    const char *split;
    size_t lines;
  } splits[] = {{"train", 62936}, {"valid", 1000}, {"test", 1000}};
  for (int s = 0; s < 3; s++) {
    for (int side = 0; side < 2; side++) {
      char name[64];
      snprintf(name, sizeof name, "%s.%s.xz", splits[s].split, side ? "fr" : "en");
      relcl_text *t = NULL;
      relcl_status st = relcl_text_read(&t, corpus_file(name));
      size_t blank = 0;
      for (size_t i = 0; i < relcl_text_count(t); i++) blank += relcl_text_blank(t, i);
      tu_check(st == RELCL_OK && relcl_text_count(t) == splits[s].lines && blank == 0,
            "bundled %s: %zu lines, %zu blank%s%s", name, relcl_text_count(t), blank,
            st == RELCL_OK ? "" : ": ", st == RELCL_OK ? "" : relcl_last_error());
      relcl_text_destroy(t);
    }
  }
}

/* ---- SentencePiece ---- */

static relcl_spm *test_spm(void) {
  const char *inputs[2] = {corpus_file("valid.en.xz"), corpus_file("valid.fr.xz")};
  char prefix[2][1024];
  snprintf(prefix[0], sizeof prefix[0], "%s", tmp_path("m1"));
  snprintf(prefix[1], sizeof prefix[1], "%s", tmp_path("m2"));
  char model[2][1040], vocab[2][1040];
  for (int k = 0; k < 2; k++) {
    snprintf(model[k], sizeof model[k], "%.1000s.model", prefix[k]);
    snprintf(vocab[k], sizeof vocab[k], "%.1000s.vocab", prefix[k]);
    tmp_path(strrchr(model[k], '/') + 1);
    tmp_path(strrchr(vocab[k], '/') + 1);
    if (relcl_spm_train(inputs, 2, 400, prefix[k]) != RELCL_OK) die("relcl_spm_train");
  }
  size_t n1 = 0, n2 = 0;
  char *b1 = slurp(model[0], &n1), *b2 = slurp(model[1], &n2);
  tu_check(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0,
        "spm: training twice gives the same model bytes (%zu)", n1);

  relcl_spm *spm = NULL;
  if (relcl_spm_load(&spm, model[0]) != RELCL_OK) die("relcl_spm_load");
  int V = relcl_spm_vocab_size(spm);
  tu_check(V > 4 && V <= 400, "spm: vocabulary of %d", V);
  tu_check(strcmp(relcl_spm_piece(spm, 0), "<pad>") == 0 &&
            strcmp(relcl_spm_piece(spm, 1), "<unk>") == 0 &&
            strcmp(relcl_spm_piece(spm, 2), "<s>") == 0 &&
            strcmp(relcl_spm_piece(spm, 3), "</s>") == 0 && relcl_spm_piece(spm, V)[0] == '\0',
        "spm: pad=0 unk=1 bos=2 eos=3");
  size_t nb = 0;
  const void *bytes = relcl_spm_bytes(spm, &nb);
  tu_check(b1 && nb == n1 && memcmp(bytes, b1, n1) == 0 && relcl_spm_hash(spm) == fnv1a(b1, n1),
        "spm: hash is FNV-1a 64 of the model file (%016llx)",
        (unsigned long long)relcl_spm_hash(spm));
  size_t nv = 0, lines = 0;
  char *v = slurp(vocab[0], &nv);
  for (size_t i = 0; v && i < nv; i++) lines += v[i] == '\n';
  tu_check(v && lines == (size_t)V && strncmp(v, "<pad>\t", 6) == 0,
        "spm: .vocab has one line per piece");
  free(v);

  /* Every line the model was trained on comes back exactly (identity normalization,
   * character_coverage 1.0), through ids and back. */
  size_t total = 0, same = 0, unk = 0;
  for (int side = 0; side < 2; side++) {
    relcl_text *t = NULL;
    if (relcl_text_read(&t, inputs[side]) != RELCL_OK) die("read valid");
    for (size_t i = 0; i < relcl_text_count(t); i++) {
      const char *line = relcl_text_line(t, i, NULL);
      int32_t *ids = NULL;
      size_t n = 0;
      char *back = NULL;
      if (relcl_spm_encode(spm, line, &ids, &n) != RELCL_OK) die("encode");
      if (relcl_spm_decode(spm, ids, n, &back) != RELCL_OK) die("decode");
      for (size_t k = 0; k < n; k++) unk += ids[k] == RELCL_UNK_ID;
      same += strcmp(back, line) == 0;
      total++;
      free(ids);
      free(back);
    }
    relcl_text_destroy(t);
  }
  tu_check(same == total && unk == 0, "spm: decode(encode(x)) == x for %zu of %zu lines, %zu unk",
        same, total, unk);

  relcl_spm *again = NULL;
  if (relcl_spm_load_bytes(&again, b1, n1) != RELCL_OK) die("relcl_spm_load_bytes");
  int32_t *x1 = NULL, *x2 = NULL;
  size_t m1 = 0, m2 = 0;
  const char *s = "Cannot open file \"%s\": %s";
  relcl_spm_encode(spm, s, &x1, &m1);
  relcl_spm_encode(again, s, &x2, &m2);
  tu_check(relcl_spm_hash(again) == relcl_spm_hash(spm) && m1 == m2 && m1 > 0 &&
            memcmp(x1, x2, m1 * sizeof *x1) == 0,
        "spm: a model loaded from bytes encodes the same");
  /* BOS/EOS/PAD decode to nothing */
  int32_t *framed = malloc((m1 + 4) * sizeof *framed);
  framed[0] = RELCL_BOS_ID;
  memcpy(framed + 1, x1, m1 * sizeof *x1);
  framed[m1 + 1] = RELCL_EOS_ID;
  framed[m1 + 2] = RELCL_PAD_ID;
  framed[m1 + 3] = RELCL_PAD_ID;
  char *txt = NULL;
  relcl_status st = relcl_spm_decode(spm, framed, m1 + 4, &txt);
  tu_check(st == RELCL_OK && strcmp(txt, s) == 0, "spm: BOS, EOS and PAD decode to nothing");
  free(txt);
  framed[1] = V;
  st = relcl_spm_decode(spm, framed, m1 + 4, &txt);
  tu_check(st == RELCL_ERR_INVALID_ARG, "spm: id outside the vocabulary refused: %s",
        relcl_last_error());
  free(framed);
  free(x1);
  free(x2);
  relcl_spm_destroy(again);

  int32_t *ids = NULL;
  size_t n = 0;
  relcl_spm_encode(spm, "\xE6\x97\xA5\xE6\x9C\xAC file", &ids, &n);
  int has_unk = 0;
  for (size_t k = 0; k < n; k++) has_unk |= ids[k] == RELCL_UNK_ID;
  tu_check(has_unk, "spm: unseen characters encode to <unk>");
  free(ids);
  st = relcl_spm_encode(spm, "", &ids, &n);
  tu_check(st == RELCL_OK && n == 0 && ids == NULL, "spm: empty text, no ids");

  /* bad models and bad training input */
  relcl_spm *bad = NULL;
  const char *notmodel = write_text("not.model", "hello\n");
  st = relcl_spm_load(&bad, notmodel);
  tu_check(st == RELCL_ERR_FORMAT && bad == NULL && error_at(notmodel, 0, "SentencePiece"),
        "spm: a text file is not a model: %s", relcl_last_error());
  st = relcl_spm_load(&bad, tmp_path("missing.model"));
  tu_check(st == RELCL_ERR_IO, "spm: missing model file: %s", relcl_last_error());
  const char *badin = write_text("bad_train.txt", "a b c\nd e\nf \xC3( g\n");
  st = relcl_spm_train(&badin, 1, 100, tmp_path("m3"));
  tu_check(st == RELCL_ERR_FORMAT && error_at(badin, 3, "invalid UTF-8"),
        "spm: training refuses bad UTF-8 like the reader: %s", relcl_last_error());
  free(b1);
  free(b2);
  return spm;
}

/* ---- corpus ---- */

static void test_corpus(const relcl_spm *spm) {
  relcl_corpus *c = NULL;
  const char *en = write_text("c.en", "one file\nfive files\nthree\nfour\nfive\n\n");
  const char *fr5 = write_text("c5.fr", "un fichier\ncinq fichiers\ntrois\nquatre\ncinq\n");
  relcl_status st = relcl_corpus_load(&c, en, fr5, spm, 0);
  tu_check(st == RELCL_ERR_FORMAT && c == NULL && error_at(en, 6, "line counts differ") &&
            strstr(relcl_last_error(), fr5) && strstr(relcl_last_error(), "has 6 lines") &&
            strstr(relcl_last_error(), "has 5 lines"),
        "corpus: line counts 6 vs 5: %s", relcl_last_error());

  const char *fr_bad = write_text("cbad.fr", "un\ndeux\ntrois \xFF\nquatre\ncinq\nsix\n");
  st = relcl_corpus_load(&c, en, fr_bad, spm, 0);
  tu_check(st == RELCL_ERR_FORMAT && error_at(fr_bad, 3, "invalid UTF-8"),
        "corpus: bad UTF-8 on the target side, line 3: %s", relcl_last_error());
  static const char fr_nul[] = "un\ndeux\0\ntrois\nquatre\ncinq\nsix\n";
  const char *fr_z = write_file("cnul.fr", fr_nul, sizeof fr_nul - 1);
  st = relcl_corpus_load(&c, en, fr_z, spm, 0);
  tu_check(st == RELCL_ERR_FORMAT && error_at(fr_z, 2, "NUL byte"),
        "corpus: NUL byte on the target side, line 2: %s", relcl_last_error());

  /* empty lines: src line 6, tgt line 2 (empty) and line 4 (blank) */
  const char *fr = write_text("c.fr", "un fichier\n\ntrois\n \t \nles cinq\nsix\n");
  st = relcl_corpus_load(&c, en, fr, spm, 0);
  relcl_corpus_stats s;
  relcl_corpus_get_stats(c, &s);
  tu_check(st == RELCL_OK && s.lines == 6 && s.empty == 3 && s.too_long == 0 && s.pairs == 3 &&
            relcl_corpus_size(c) == 3,
        "corpus: 3 pairs with an empty side skipped and counted (lines %zu empty %zu pairs %zu)",
        s.lines, s.empty, s.pairs);
  tu_check(relcl_corpus_line(c, 0) == 1 && relcl_corpus_line(c, 1) == 3 &&
            relcl_corpus_line(c, 2) == 5,
        "corpus: kept pairs remember their lines 1, 3, 5");
  int len = 0;
  int32_t *ids = NULL;
  size_t n = 0;
  relcl_spm_encode(spm, "les cinq", &ids, &n);
  const int32_t *t2 = relcl_corpus_tgt(c, 2, &len);
  tu_check(t2 && (size_t)len == n && memcmp(t2, ids, n * sizeof *ids) == 0,
        "corpus: ids are the model's encoding");
  free(ids);
  relcl_corpus_destroy(c);
  c = NULL;

  /* over-long pairs, counted against an independent count */
  const int max_len = 12;
  const char *ven = corpus_file("valid.en.xz"), *vfr = corpus_file("valid.fr.xz");
  relcl_text *a = NULL, *b = NULL;
  if (relcl_text_read(&a, ven) != RELCL_OK || relcl_text_read(&b, vfr) != RELCL_OK)
    die("read valid");
  size_t want_long = 0;
  for (size_t i = 0; i < relcl_text_count(a); i++) {
    size_t nx = 0, ny = 0;
    int32_t *x = NULL, *y = NULL;
    relcl_spm_encode(spm, relcl_text_line(a, i, NULL), &x, &nx);
    relcl_spm_encode(spm, relcl_text_line(b, i, NULL), &y, &ny);
    want_long += nx > (size_t)max_len || ny > (size_t)max_len;
    free(x);
    free(y);
  }
  st = relcl_corpus_load(&c, ven, vfr, spm, max_len);
  relcl_corpus_get_stats(c, &s);
  int longest = 0;
  for (size_t i = 0; i < relcl_corpus_size(c); i++) {
    int ls, lt;
    relcl_corpus_src(c, i, &ls);
    relcl_corpus_tgt(c, i, &lt);
    if (ls > longest) longest = ls;
    if (lt > longest) longest = lt;
  }
  tu_check(st == RELCL_OK && want_long > 0 && s.too_long == want_long &&
            s.pairs + s.too_long + s.empty == s.lines && longest <= max_len &&
            s.src_max <= max_len && s.tgt_max <= max_len,
        "corpus: %zu pairs over %d subwords skipped and counted (expected %zu), %zu kept",
        s.too_long, max_len, want_long, s.pairs);
  relcl_text_destroy(a);
  relcl_text_destroy(b);
  relcl_corpus_destroy(c);

  relcl_corpus_create(&c);
  int32_t one = 5;
  tu_check(relcl_corpus_add(c, &one, 0, &one, 1, 1) == RELCL_ERR_INVALID_ARG &&
            relcl_corpus_add(c, &one, 1, NULL, 1, 1) == RELCL_ERR_INVALID_ARG &&
            relcl_corpus_size(c) == 0,
        "corpus: add refuses an empty side");
  relcl_corpus_destroy(c);
  relcl_corpus_destroy(NULL);
}

/* ---- batches ---- */

/* Does batch b hold pair rows as the header says? */
static int batch_well_formed(const relcl_corpus *c, const relcl_batch *b, int src_eos) {
  int S = 0, T = 0;
  size_t st = 0, tt = 0;
  for (int r = 0; r < b->batch; r++) {
    int xl, yl;
    const int32_t *x = relcl_corpus_src(c, b->pairs[r], &xl);
    const int32_t *y = relcl_corpus_tgt(c, b->pairs[r], &yl);
    const int32_t *s = b->src + (size_t)r * b->src_len;
    const int32_t *ti = b->tgt_in + (size_t)r * b->tgt_len;
    const int32_t *to = b->tgt_out + (size_t)r * b->tgt_len;
    int sl = xl + (src_eos ? 1 : 0);
    if (b->src_lens[r] != sl || b->tgt_lens[r] != yl + 1) return 0;
    if (memcmp(s, x, (size_t)xl * sizeof *x) != 0) return 0;
    if (src_eos && s[xl] != RELCL_EOS_ID) return 0;
    for (int j = sl; j < b->src_len; j++)
      if (s[j] != RELCL_PAD_ID) return 0;
    if (ti[0] != RELCL_BOS_ID || memcmp(ti + 1, y, (size_t)yl * sizeof *y) != 0) return 0;
    if (memcmp(to, y, (size_t)yl * sizeof *y) != 0 || to[yl] != RELCL_EOS_ID) return 0;
    for (int j = yl + 1; j < b->tgt_len; j++)
      if (ti[j] != RELCL_PAD_ID || to[j] != RELCL_PAD_ID) return 0;
    if (sl > S) S = sl;
    if (yl + 1 > T) T = yl + 1;
    st += (size_t)sl;
    tt += (size_t)yl + 1;
  }
  return S == b->src_len && T == b->tgt_len && st == b->src_tokens && tt == b->tgt_tokens;
}

static int same_batch(const relcl_batch *a, const relcl_batch *b) {
  if (a->batch != b->batch || a->src_len != b->src_len || a->tgt_len != b->tgt_len) return 0;
  size_t B = (size_t)a->batch;
  return memcmp(a->pairs, b->pairs, B * sizeof *a->pairs) == 0 &&
         memcmp(a->src, b->src, B * (size_t)a->src_len * sizeof *a->src) == 0 &&
         memcmp(a->tgt_in, b->tgt_in, B * (size_t)a->tgt_len * sizeof *a->tgt_in) == 0 &&
         memcmp(a->tgt_out, b->tgt_out, B * (size_t)a->tgt_len * sizeof *a->tgt_out) == 0;
}

/* Pair indices of a whole epoch, in batch order, rows in order. */
static size_t *epoch_sequence(relcl_batcher *bt, uint64_t epoch, size_t n) {
  size_t *seq = malloc(n * sizeof *seq), k = 0;
  relcl_batch b;
  for (size_t i = 0; i < relcl_batcher_count(bt); i++) {
    if (relcl_batcher_get(bt, epoch, i, &b) != RELCL_OK) die("batcher_get");
    for (int r = 0; r < b.batch && k < n; r++) seq[k++] = b.pairs[r];
  }
  return seq;
}

static void test_batches(const relcl_spm *spm) {
  relcl_corpus *c = NULL;
  if (relcl_corpus_load(&c, corpus_file("valid.en.xz"), corpus_file("valid.fr.xz"), spm, 0) !=
      RELCL_OK)
    die("corpus_load valid");
  const size_t N = relcl_corpus_size(c), budget = 300;
  relcl_batch_opts o = relcl_batch_opts_default(budget, 1234);
  relcl_batcher *bt = NULL, *bt2 = NULL;
  if (relcl_batcher_create(&bt, c, &o) != RELCL_OK) die("batcher_create");
  const size_t nb = relcl_batcher_count(bt);

  for (uint64_t e = 0; e < 3; e++) {
    int *seen = calloc(N, sizeof *seen);
    int budget_ok = 1, formed = 1, pos_ok = 1;
    size_t rows = 0, real = 0, cells = 0;
    relcl_batch b;
    for (size_t i = 0; i < nb; i++) {
      if (relcl_batcher_get(bt, e, i, &b) != RELCL_OK) die("batcher_get");
      for (int r = 0; r < b.batch; r++) seen[b.pairs[r]]++;
      int L = b.src_len > b.tgt_len ? b.src_len : b.tgt_len;
      budget_ok &= (size_t)b.batch * (size_t)L <= budget;
      formed &= batch_well_formed(c, &b, 1);
      pos_ok &= b.epoch == e && b.index == i;
      rows += (size_t)b.batch;
      real += b.src_tokens + b.tgt_tokens;
      cells += (size_t)b.batch * (size_t)(b.src_len + b.tgt_len);
    }
    int once = 1;
    for (size_t p = 0; p < N; p++) once &= seen[p] == 1;
    free(seen);
    tu_check(once && rows == N, "batches epoch %llu: each of %zu pairs exactly once",
          (unsigned long long)e, N);
    tu_check(budget_ok, "batches epoch %llu: B * max(S, T) <= %zu in all %zu batches",
          (unsigned long long)e, budget, nb);
    tu_check(formed && pos_ok, "batches epoch %llu: src + EOS, BOS + y, y + EOS, PAD after",
          (unsigned long long)e);
    /* length buckets keep padding low: a broken sort would not */
    tu_check(real * 10 >= cells * 8, "batches epoch %llu: %.1f%% of cells are real tokens",
          (unsigned long long)e, 100.0 * (double)real / (double)cells);
  }

  size_t *s0 = epoch_sequence(bt, 0, N), *s1 = epoch_sequence(bt, 1, N);
  if (relcl_batcher_create(&bt2, c, &o) != RELCL_OK) die("batcher_create 2");
  /* each batcher owns its batch arrays: two can be compared side by side */
  int same = 1;
  for (uint64_t e = 0; e < 2; e++)
    for (size_t i = 0; i < nb; i++) {
      relcl_batch x, y;
      relcl_batcher_get(bt, e, i, &x);
      relcl_batcher_get(bt2, e, i, &y);
      same &= same_batch(&x, &y);
    }
  tu_check(same, "batches: same corpus and seed, same batches");
  tu_check(memcmp(s0, s1, N * sizeof *s0) != 0, "batches: epoch 1 is in another order than 0");
  relcl_batcher_destroy(bt2);
  bt2 = NULL;
  relcl_batch_opts o2 = relcl_batch_opts_default(budget, 1235);
  relcl_batcher_create(&bt2, c, &o2);
  size_t *t0 = epoch_sequence(bt2, 0, N);
  tu_check(relcl_batcher_count(bt2) == nb && memcmp(s0, t0, N * sizeof *s0) != 0,
        "batches: another seed, another order, as many batches");
  free(t0);
  relcl_batcher_destroy(bt2);
  bt2 = NULL;

  relcl_batch_opts o3 = o;
  o3.shuffle = 0;
  o3.src_eos = 0;
  relcl_batcher_create(&bt2, c, &o3);
  size_t *u0 = epoch_sequence(bt2, 0, N), *u3 = epoch_sequence(bt2, 3, N);
  relcl_batch b;
  relcl_batcher_get(bt2, 0, 0, &b);
  tu_check(memcmp(u0, u3, N * sizeof *u0) == 0 && batch_well_formed(c, &b, 0),
        "batches: without shuffle every epoch is the same; without src EOS rows are x");
  free(u0);
  free(u3);
  relcl_batcher_destroy(bt2);
  bt2 = NULL;

  /* resume: run past an epoch boundary, record the position, continue elsewhere */
  relcl_batch x, y;
  for (size_t i = 0; i < nb + 5; i++) relcl_batcher_next(bt, &x);
  uint64_t e;
  size_t idx;
  relcl_batcher_tell(bt, &e, &idx);
  tu_check(e == 1 && idx == 5 && x.epoch == 1 && x.index == 4,
        "batches: position after %zu+5 is (1, 5)", nb);
  relcl_batcher_create(&bt2, c, &o);
  relcl_batcher_seek(bt2, e, idx);
  int resumed = 1;
  for (size_t i = 0; i < nb; i++) {
    relcl_batcher_next(bt, &x);
    relcl_batcher_next(bt2, &y);
    resumed &= x.epoch == y.epoch && x.index == y.index && same_batch(&x, &y);
  }
  tu_check(resumed, "batches: seek to a told position gives the same next batches");
  relcl_batcher_seek(bt2, 4, nb);
  relcl_batcher_tell(bt2, &e, &idx);
  tu_check(e == 5 && idx == 0, "batches: seek(4, count) means (5, 0)");
  tu_check(relcl_batcher_seek(bt2, 0, nb + 1) == RELCL_ERR_INVALID_ARG &&
            relcl_batcher_get(bt2, 0, nb, &y) == RELCL_ERR_INVALID_ARG,
        "batches: positions past the epoch refused");
  relcl_batcher_destroy(bt2);
  bt2 = NULL;

  relcl_corpus_stats cs;
  relcl_corpus_get_stats(c, &cs);
  int longest = (cs.src_max + 1 > cs.tgt_max + 1 ? cs.src_max + 1 : cs.tgt_max + 1);
  relcl_batch_opts small = relcl_batch_opts_default((size_t)longest - 1, 1);
  tu_check(relcl_batcher_create(&bt2, c, &small) == RELCL_ERR_INVALID_ARG && bt2 == NULL,
        "batches: budget below the longest pair refused: %s", relcl_last_error());
  small.batch_tokens = (size_t)longest;
  tu_check(relcl_batcher_create(&bt2, c, &small) == RELCL_OK,
        "batches: budget equal to the longest pair accepted");
  relcl_batcher_destroy(bt2);
  relcl_corpus *empty = NULL;
  relcl_corpus_create(&empty);
  bt2 = NULL;
  tu_check(relcl_batcher_create(&bt2, empty, &o) == RELCL_ERR_INVALID_ARG,
        "batches: empty corpus refused");
  relcl_corpus_destroy(empty);

  free(s0);
  free(s1);
  relcl_batcher_destroy(bt);
  relcl_batcher_destroy(NULL);
  relcl_corpus_destroy(c);
}

/* The order relcl_data.h specifies, as computed by an independent Python implementation of
 * that text: 12 pairs with |x| = i%3 + 1, |y| = 7i%4 + 1, src EOS, budget 9, seed 42.
 * Batches of an epoch, rows in order, -1 between batches. */
static void test_golden_order(void) {
  static const int golden[3][32] = {
      {5, -1, 3, 6, -1, 8, 2, -1, 1, -1, 11, 10, -1, 9, -1, 0, 7, 4, -1},
      {9, -1, 2, 8, -1, 0, 4, 3, -1, 1, -1, 7, 6, -1, 5, -1, 10, 11, -1},
      {0, 3, 4, -1, 11, 10, -1, 1, -1, 5, -1, 7, 6, -1, 9, -1, 8, 2, -1},
  };
  static const uint64_t epochs[3] = {0, 1, 7};
  relcl_corpus *c = NULL;
  relcl_corpus_create(&c);
  int32_t ids[4] = {10, 11, 12, 13};
  for (int i = 0; i < 12; i++)
    relcl_corpus_add(c, ids, i % 3 + 1, ids, (i * 7) % 4 + 1, (size_t)i + 1);
  relcl_batch_opts o = relcl_batch_opts_default(9, 42);
  relcl_batcher *bt = NULL;
  if (relcl_batcher_create(&bt, c, &o) != RELCL_OK) die("batcher golden");
  for (int k = 0; k < 3; k++) {
    int got[32], n = 0;
    relcl_batch b;
    for (size_t i = 0; i < relcl_batcher_count(bt); i++) {
      relcl_batcher_get(bt, epochs[k], i, &b);
      for (int r = 0; r < b.batch && n < 31; r++) got[n++] = (int)b.pairs[r];
      if (n < 32) got[n++] = -1;
    }
    int same = n == 19 && memcmp(got, golden[k], (size_t)n * sizeof *got) == 0;
    tu_check(same, "batches: epoch %llu in the specified splitmix64 order",
          (unsigned long long)epochs[k]);
  }
  relcl_batcher_destroy(bt);
  relcl_corpus_destroy(c);
}

int main(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/relcl-test-data-XXXXXX", base && *base ? base : "/tmp");
  if (mkdtemp(tmpdir) == NULL) {
    fprintf(stderr, "test_data: cannot create a temporary directory\n");
    return 2;
  }
  test_text();
  test_bad_utf8();
  test_xz();
  test_bundled();
  relcl_spm *spm = test_spm();
  test_corpus(spm);
  test_batches(spm);
  test_golden_order();
  relcl_spm_destroy(spm);
  relcl_spm_destroy(NULL);
  cleanup();
  return tu_finish();
}
