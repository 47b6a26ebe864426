/* relcl-translate: translates raw sentences, one per line, with a model trained by relcl-train:
 * beam search over the cached incremental decoder, detokenized by the model's SentencePiece
 * vocabulary. Always exactly one output line per input line (n lines with --n-best n). Thin:
 * batching lives in translate_model.c, loading and decoding in librelcl. */
#include "relcl.h"
#include "translate_model.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG "relcl-translate"

typedef struct opts {
  const char *model, *checkpoint, *spm, *input, *output, *device;
  int beam, n_best, batch_size, max_len_b;
  double length_penalty, max_len_a;
  int quiet, help;
} opts;

static void usage(FILE *out) {
  fprintf(out,
          "usage: " PROG " --model PATH [options] < input > output\n"
          "Translates one sentence per line with a model trained by relcl-train.\n\n"
          "  --model PATH           a model directory (relcl-train --model-dir) or one checkpoint\n"
          "  --checkpoint WHICH     in a directory: last (newest valid, default), best, or a file\n"
          "                         (e.g. average.safetensors from relcl-average)\n"
          "  --spm-model FILE       SentencePiece model (default: the one beside the checkpoint)\n"
          "  --input FILE           read FILE instead of standard input ('-': stdin)\n"
          "  --output FILE          write FILE instead of standard output ('-': stdout)\n"
          "  --beam-size N          hypotheses kept per sentence (4; 1 is greedy)\n"
          "  --length-penalty A     rank by logprob / ((5 + len) / 6)^A (0.6; 0: none)\n"
          "  --max-length-a A       at most A * source length + B output tokens (1)\n"
          "  --max-length-b B       (50), never more than the model's maximum length\n"
          "  --max-extra N          the same as --max-length-a 1 --max-length-b N\n"
          "  --n-best N             print N hypotheses a sentence as 'LINE ||| TEXT ||| SCORE'\n"
          "                         (LINE from 0, best first; 1: plain text, the default)\n"
          "  --batch-size N         sentences decoded together (64; device memory grows with it)\n"
          "  --device SPEC          OpenCL device, as RELCL_DEVICE (\"P:D\" or a name substring)\n"
          "  --quiet                no summary on standard error\n"
          "  --help                 this text\n\n"
          "Empty lines give empty lines; lines longer than the model's maximum are cropped and\n"
          "invalid UTF-8 is replaced by U+FFFD, each counted in a warning at the end.\n"
          "Exit status: 0, 1 for an error (one line on standard error), 2 for a usage error.\n");
}

/* A batch of one short line, translated and thrown away before the clock starts. PoCL (CPUs)
 * compiles a kernel for the device at its first launch, and a first run after a build timed
 * the decoding kernels' compilation (training launches none of them) inside its batches: on
 * a Sapphire Rapids-class Xeon, the demo's test set from fresh caches took 8.0-8.4 s against
 * 1.35-1.46 s in later runs; with this batch first 5.65 s, and with one work-group size a
 * kernel as well (lib/runtime/kernel.c's relcl__wg) 1.76-1.86 s, the compilation counted as
 * loading (9.7-9.9 s against 7.5-7.6). Two output tokens at most: every decoding kernel runs
 * in the first steps. */
static int warm_up(relcl_model *model, const relcl_spm *spm, const tm_opts *to, char *err,
                   size_t errsize) {
  tm_opts w = *to;
  w.beam.max_len_a = 0.0f;
  w.beam.max_len_b = 2;
  const size_t n = (size_t)(w.batch_size < 1 ? 1 : w.batch_size), k = (size_t)w.beam.n_best;
  const char **lines = calloc(n, sizeof *lines);
  char **res = calloc(n * k, sizeof *res);
  tm_stats stats;
  memset(&stats, 0, sizeof stats);
  int e = 1;
  if (!lines || !res) {
    snprintf(err, errsize, "out of host memory");
  } else {
    for (size_t i = 0; i < n; i++) lines[i] = "a warm-up line";
    e = tm_translate(model, spm, lines, n, &w, res, NULL, NULL, &stats, err, errsize);
    for (size_t i = 0; i < n * k; i++) free(res[i]);
  }
  free(lines);
  free(res);
  return e;
}

static int usage_error(const char *fmt, const char *a) {
  fprintf(stderr, PROG ": ");
  fprintf(stderr, fmt, a);
  fprintf(stderr, " (try --help)\n");
  return 2;
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

static bool parse_real(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

enum { OPT_MODEL = 256, OPT_CHECKPOINT, OPT_SPM, OPT_INPUT, OPT_OUTPUT, OPT_BEAM, OPT_LP,
       OPT_LEN_A, OPT_LEN_B, OPT_EXTRA, OPT_NBEST, OPT_BATCH, OPT_DEVICE, OPT_QUIET, OPT_HELP };

static const struct option long_opts[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
    {"spm-model", required_argument, NULL, OPT_SPM},
    {"input", required_argument, NULL, OPT_INPUT},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"beam-size", required_argument, NULL, OPT_BEAM},
    {"length-penalty", required_argument, NULL, OPT_LP},
    {"max-length-a", required_argument, NULL, OPT_LEN_A},
    {"max-length-b", required_argument, NULL, OPT_LEN_B},
    {"max-extra", required_argument, NULL, OPT_EXTRA},
    {"n-best", required_argument, NULL, OPT_NBEST},
    {"batch-size", required_argument, NULL, OPT_BATCH},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* Returns 0, or 2 after a message. */
static int parse_args(opts *o, int argc, char **argv) {
  memset(o, 0, sizeof *o);
  o->beam = 4;
  o->n_best = 1;
  o->batch_size = 64;
  o->length_penalty = 0.6;
  o->max_len_a = 1.0;
  o->max_len_b = 50;
  opterr = 0; /* our own one-line messages */
  int c;
  while ((c = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    /* getopt_long has just stepped past the option it returns */
    if (c == '?') return usage_error("unknown option '%s'", argv[optind - 1]);
    if (c == ':') return usage_error("%s needs a value", argv[optind - 1]);
    if (c == 'h' || c == OPT_HELP) {
      o->help = 1;
      continue;
    }
    if (c == OPT_QUIET) {
      o->quiet = 1;
      continue;
    }
    const char *val = optarg;
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", long_opts[c - OPT_MODEL].name);
    if (val[0] == '\0') return usage_error("%s: empty value", flag);
    bool ok = true;
    switch (c) {
    case OPT_MODEL: o->model = val; break;
    case OPT_CHECKPOINT: o->checkpoint = val; break;
    case OPT_SPM: o->spm = val; break;
    case OPT_INPUT: o->input = val; break;
    case OPT_OUTPUT: o->output = val; break;
    case OPT_DEVICE: o->device = val; break;
    case OPT_BEAM: ok = parse_int(val, 1, 1024, &o->beam); break;
    case OPT_NBEST: ok = parse_int(val, 1, 1024, &o->n_best); break;
    case OPT_BATCH: ok = parse_int(val, 1, 100000, &o->batch_size); break;
    case OPT_LEN_B: ok = parse_int(val, 0, 1000000, &o->max_len_b); break;
    case OPT_LEN_A: ok = parse_real(val, 0.0, 1e4, &o->max_len_a); break;
    case OPT_LP: ok = parse_real(val, -100.0, 100.0, &o->length_penalty); break;
    case OPT_EXTRA:
      ok = parse_int(val, 0, 1000000, &o->max_len_b);
      o->max_len_a = 1.0;
      break;
    default: break;
    }
    if (!ok) {
      fprintf(stderr, PROG ": %s: invalid value '%s' (try --help)\n", flag, val);
      return 2;
    }
  }
  if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
  if (o->help) return 0;
  if (o->model == NULL) return usage_error("%s is required", "--model");
  if (o->n_best > o->beam) {
    fprintf(stderr, PROG ": --n-best %d is larger than --beam-size %d (try --help)\n",
            o->n_best, o->beam);
    return 2;
  }
  return 0;
}

/* ---- input: one line at a time, made valid UTF-8 ---- */

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when it is not one: overlong
 * forms, surrogates and code points past U+10FFFF are invalid, as in relcl_text_read. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return c == 0 ? 0 : 1; /* NUL: not text */
  size_t len;
  unsigned min;
  if (c >= 0xc2 && c <= 0xdf) len = 2, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) len = 3, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) len = 4, min = 0x10000;
  else return 0;
  if (n < len) return 0;
  unsigned cp = c & (0x7f >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

/* s[0..n) with every invalid byte (and NUL) replaced by U+FFFD, NUL-terminated, malloc'ed.
 * *bad tells whether anything was replaced. */
static char *sanitize(const char *s, size_t n, bool *bad) {
  char *out = malloc(3 * n + 1), *p = out;
  *bad = false;
  if (out == NULL) return NULL;
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t k = utf8_seq(u + i, n - i);
    if (k == 0) {
      memcpy(p, "\xef\xbf\xbd", 3);
      p += 3;
      i++;
      *bad = true;
    } else {
      memcpy(p, s + i, k);
      p += k;
      i += k;
    }
  }
  *p = '\0';
  return out;
}

typedef struct reader {
  FILE *in;
  char *buf;
  size_t cap;
  size_t line_no;
  size_t bad_utf8;
  int err_no; /* errno of a failed read */
} reader;

/* The next line (without its '\n' and one '\r' before it), or NULL at the end; *err set on a
 * read error or out of memory. */
static char *read_line(reader *r, bool *err) {
  *err = false;
  errno = 0;
  ssize_t n = getline(&r->buf, &r->cap, r->in);
  if (n < 0) {
    /* Only feof means the end: glibc's getline returns -1 for ENOMEM (and EOVERFLOW) without
     * setting the error flag, and taking that for the end would drop the rest silently. */
    if (ferror(r->in) || !feof(r->in)) {
      *err = true;
      r->err_no = errno ? errno : EIO;
    }
    return NULL;
  }
  size_t len = (size_t)n;
  if (len > 0 && r->buf[len - 1] == '\n') len--;
  if (len > 0 && r->buf[len - 1] == '\r') len--;
  const char *s = r->buf;
  if (r->line_no == 0 && len >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0) { /* byte-order mark */
    s += 3;
    len -= 3;
  }
  r->line_no++;
  bool bad;
  char *line = sanitize(s, len, &bad);
  if (line == NULL) {
    *err = true;
    r->err_no = ENOMEM;
  }
  r->bad_utf8 += bad;
  return line;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  opts o;
  int rc = parse_args(&o, argc, argv);
  if (rc) return rc;
  if (o.help) {
    usage(stdout);
    return 0;
  }
  const double t_start = now();
  char err[4096];
  tm_files files;
  relcl_context *ctx = NULL;
  relcl_model *model = NULL;
  reader rd = {NULL, NULL, 0, 0, 0, 0};
  FILE *out = stdout;
  char **lines = NULL, **res = NULL;
  double *scores = NULL;
  int *counts = NULL;
  size_t chunk = 0;
  rc = 1;
  bool files_open = false;
  if (tm_files_open(&files, o.model, o.checkpoint, o.spm, err, sizeof err)) {
    fprintf(stderr, PROG ": %s\n", err);
    goto done;
  }
  files_open = true;
  if (files.skipped && !o.quiet) {
    /* newer checkpoints that did not validate: say so, on one line each */
    fprintf(stderr, PROG ": warning: passed over a damaged checkpoint: %s", files.skipped);
    if (files.skipped[strlen(files.skipped) - 1] != '\n') fputc('\n', stderr);
  }
  if (o.input && strcmp(o.input, "-") != 0) {
    if ((rd.in = fopen(o.input, "rb")) == NULL) {
      fprintf(stderr, PROG ": %s: %s\n", o.input, strerror(errno));
      goto done;
    }
  } else {
    rd.in = stdin;
  }
  if (o.output && strcmp(o.output, "-") != 0) {
    if ((out = fopen(o.output, "w")) == NULL) {
      fprintf(stderr, PROG ": %s: %s\n", o.output, strerror(errno));
      out = stdout;
      goto done;
    }
  }
  if (relcl_context_create(&ctx, o.device) != RELCL_OK) {
    fprintf(stderr, PROG ": device: %s\n", relcl_last_error());
    goto done;
  }
  if (tm_model_load(&files, ctx, &model, err, sizeof err)) {
    fprintf(stderr, PROG ": %s\n", err);
    goto done;
  }
  tm_opts to;
  to.beam = relcl_beam_opts_default();
  to.beam.beam_size = o.beam;
  to.beam.n_best = o.n_best;
  to.beam.length_penalty = (float)o.length_penalty;
  to.beam.max_len_a = (float)o.max_len_a;
  to.beam.max_len_b = o.max_len_b;
  to.batch_size = o.batch_size;
  /* read in chunks: enough lines to sort into full batches, few enough to stream */
  chunk = (size_t)o.batch_size * 16 < 256 ? 256 : (size_t)o.batch_size * 16;
  lines = calloc(chunk, sizeof *lines);
  res = calloc(chunk * (size_t)o.n_best, sizeof *res);
  scores = calloc(chunk * (size_t)o.n_best, sizeof *scores);
  counts = calloc(chunk, sizeof *counts);
  if (!lines || !res || !scores || !counts) {
    fprintf(stderr, PROG ": out of host memory\n");
    goto done;
  }
  if (warm_up(model, files.spm, &to, err, sizeof err)) {
    fprintf(stderr, PROG ": %s\n", err);
    goto done;
  }
  tm_stats stats;
  memset(&stats, 0, sizeof stats);
  const double t_loaded = now();
  size_t base = 0;
  for (;;) {
    size_t n = 0;
    bool rerr = false;
    while (n < chunk && (lines[n] = read_line(&rd, &rerr)) != NULL) n++;
    if (rerr) {
      fprintf(stderr, PROG ": reading %s after line %zu: %s\n",
              o.input ? o.input : "standard input", rd.line_no, strerror(rd.err_no));
      goto done;
    }
    if (n == 0) break;
    int e = tm_translate(model, files.spm, (const char *const *)lines, n, &to, res, scores,
                         counts, &stats, err, sizeof err);
    if (e) fprintf(stderr, PROG ": input line %zu and after: %s\n", base + 1, err);
    for (size_t i = 0; i < n && !e; i++) {
      if (o.n_best == 1) {
        fprintf(out, "%s\n", res[i]);
        continue;
      }
      for (int k = 0; k < counts[i]; k++)
        fprintf(out, "%zu ||| %s ||| %.4f\n", base + i, res[i * (size_t)o.n_best + (size_t)k],
                scores[i * (size_t)o.n_best + (size_t)k]);
    }
    for (size_t i = 0; i < n; i++) {
      free(lines[i]);
      lines[i] = NULL;
    }
    for (size_t i = 0; i < n * (size_t)o.n_best; i++) {
      free(res[i]);
      res[i] = NULL;
    }
    if (e) goto done;
    if (fflush(out) != 0) {
      fprintf(stderr, PROG ": writing %s: %s\n", o.output ? o.output : "standard output",
              strerror(errno));
      goto done;
    }
    base += n;
    if (n < chunk) break;
  }
  const double t_end = now(), dt = t_end - t_loaded;
  if (!o.quiet) {
    fprintf(stderr,
            PROG ": %zu sentences (%zu empty), %zu subwords in, %zu out, in %.2f s (+%.2f s "
            "loading): %.1f sentences/s, %.1f tokens/s (beam %d, batch %d)\n",
            stats.sentences, stats.empty, stats.src_tokens, stats.out_tokens, dt,
            t_loaded - t_start, dt > 0 ? (double)stats.sentences / dt : 0.0,
            dt > 0 ? (double)stats.out_tokens / dt : 0.0, o.beam, o.batch_size);
    if (stats.cropped)
      fprintf(stderr, PROG ": warning: %zu line%s longer than the model's maximum of %d "
              "subwords cropped\n", stats.cropped, stats.cropped == 1 ? "" : "s",
              relcl_model_get_config(model)->max_length - 1);
    if (rd.bad_utf8)
      fprintf(stderr, PROG ": warning: %zu line%s with invalid UTF-8 (replaced by U+FFFD)\n",
              rd.bad_utf8, rd.bad_utf8 == 1 ? "" : "s");
  }
  rc = 0;
done:
  if (lines)
    for (size_t i = 0; i < chunk; i++) free(lines[i]);
  if (res)
    for (size_t i = 0; i < chunk * (size_t)o.n_best; i++) free(res[i]);
  free(lines);
  free(res);
  free(scores);
  free(counts);
  free(rd.buf);
  if (rd.in && rd.in != stdin) fclose(rd.in);
  if (out != stdout && fclose(out) != 0 && rc == 0) {
    fprintf(stderr, PROG ": writing %s: %s\n", o.output, strerror(errno));
    rc = 1;
  }
  relcl_model_destroy(model);
  relcl_context_destroy(ctx);
  if (files_open) tm_files_close(&files);
  return rc;
}
