/* relcl-train's options: the table, flag and config-file parsing (libyaml for YAML, cJSON
 * for JSON), resolution (defaults < preset < file < flags) and the JSON dump (cJSON). */
#include "train_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* ---- the table ---- */

typedef enum opt_type {
  T_STR,    /* char * (NULL: unset) */
  T_CHOICE, /* char *, one of choices */
  T_INT,    /* int in [min, max] */
  T_I64,    /* int64_t in [min, max] */
  T_U64,    /* uint64_t */
  T_REAL,   /* double in [min, max) or [min, max] (see max_open) */
  T_BOOL,   /* int 0/1 */
  T_LAYERS, /* sets enc_layers and dec_layers; not dumped */
  T_MODE,   /* command line only, not dumped: config, dump-config, resume, help */
} opt_type;

typedef struct opt {
  const char *name; /* the flag without "--"; files accept '_' for '-' */
  opt_type type;
  size_t off;
  double min, max;
  int max_open; /* T_REAL: the value must stay below max */
  const char *choices;
  const char *meta;
  const char *help;
  const char *section; /* starts a --help section */
} opt;

#define OFF(field) offsetof(train_config, field)
#define NOLIM 0, 0, 0, NULL

static const opt options[] = {
    {"train-src", T_STR, OFF(train_src), NOLIM, "FILE", "training source text, one sentence a line (.xz read transparently)", "data"},
    {"train-tgt", T_STR, OFF(train_tgt), NOLIM, "FILE", "training target text, line i translating line i of --train-src", NULL},
    {"valid-src", T_STR, OFF(valid_src), NOLIM, "FILE", "validation source text (optional; with --valid-tgt)", NULL},
    {"valid-tgt", T_STR, OFF(valid_tgt), NOLIM, "FILE", "validation target text", NULL},
    {"spm-model", T_STR, OFF(spm_model), NOLIM, "FILE", "SentencePiece model to use; default: train one on the training text into MODEL_DIR/spm.model", NULL},
    {"vocab-size", T_INT, OFF(vocab_size), 5, 1000000, 0, NULL, "N", "vocabulary size of a SentencePiece model trained here [8000]", NULL},

    {"preset", T_CHOICE, OFF(preset), 0, 0, 0, "tiny|base|big", "NAME", "model sizes to start from; the flags below override them [base]", "model"},
    {"layers", T_LAYERS, 0, 1, RELCL_MODEL_MAX_LAYERS, 0, NULL, "N", "encoder and decoder layers", NULL},
    {"enc-layers", T_INT, OFF(enc_layers), 1, RELCL_MODEL_MAX_LAYERS, 0, NULL, "N", "encoder layers", NULL},
    {"dec-layers", T_INT, OFF(dec_layers), 1, RELCL_MODEL_MAX_LAYERS, 0, NULL, "N", "decoder layers", NULL},
    {"d-model", T_INT, OFF(d_model), 1, 65536, 0, NULL, "N", "model width", NULL},
    {"heads", T_INT, OFF(heads), 1, 1024, 0, NULL, "N", "attention heads (must divide --d-model)", NULL},
    {"d-ff", T_INT, OFF(d_ff), 1, 1 << 20, 0, NULL, "N", "feed-forward width", NULL},
    {"dropout", T_REAL, OFF(dropout), 0, 1, 1, NULL, "P", "residual, embedding and attention dropout", NULL},
    {"label-smoothing", T_REAL, OFF(label_smoothing), 0, 1, 1, NULL, "E", "label smoothing of the training loss [0.1]", NULL},
    {"positions", T_CHOICE, OFF(positions), 0, 0, 0, "absolute|relative|both", "KIND", "sinusoidal encodings, Shaw et al. relative representations, or both", NULL},
    {"max-relative-position", T_INT, OFF(max_rel), 0, 4096, 0, NULL, "K", "clipping distance k of the relative positions", NULL},
    {"relative-per-head", T_BOOL, OFF(rel_per_head), NOLIM, NULL, "one relative table per head (default: shared by a layer's heads)", NULL},
    {"relative-keys-only", T_BOOL, OFF(rel_keys_only), NOLIM, NULL, "relative representations on keys only, no a^V term", NULL},
    {"pre-norm", T_BOOL, OFF(pre_norm), NOLIM, NULL, "pre-layer-norm blocks (default: post-norm, as the paper)", NULL},

    {"batch-tokens", T_I64, OFF(batch_tokens), 1, 1e12, 0, NULL, "N", "tokens per micro-batch, padding included: rows * longest side [4096]", "training"},
    {"accum", T_INT, OFF(accum), 1, 1 << 20, 0, NULL, "N", "micro-batches accumulated into one update [1]", NULL},
    {"max-length", T_INT, OFF(max_length), 1, 1 << 20, 0, NULL, "N", "skip pairs with a side over N subwords [128]", NULL},
    {"warmup", T_I64, OFF(warmup), 1, 1e15, 0, NULL, "N", "learning-rate warm-up steps [4000]", NULL},
    {"lr-scale", T_REAL, OFF(lr_scale), 0, 1e9, 0, NULL, "X", "lr = X * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) [1]", NULL},
    {"clip-norm", T_REAL, OFF(clip_norm), 0, 1e30, 0, NULL, "X", "clip the gradient's L2 norm to X; 0: no clipping [0]", NULL},
    {"max-steps", T_I64, OFF(max_steps), 0, 1e15, 0, NULL, "N", "stop after N updates in all; 0: no limit [0]", NULL},
    {"max-time", T_REAL, OFF(max_time), 0, 1e12, 0, NULL, "SECONDS", "stop this run after that much training time; 0: no limit [0]", NULL},
    {"seed", T_U64, OFF(seed), NOLIM, "N", "seed of initialization, batch order and dropout [1]", NULL},
    {"device", T_STR, OFF(device), NOLIM, "SPEC", "OpenCL device, as RELCL_DEVICE: P:D or part of a name [RELCL_DEVICE, else the first GPU, else the first device]", NULL},

    {"device-map", T_STR, OFF(device_map), NOLIM, "LIST", "under mpirun: comma-separated devices (as --device), the rank with local rank i on a host takes entry i (modulo the list's length); --device or RELCL_DEVICE win", "multi-node (mpirun)"},
    {"balance", T_BOOL, OFF(balance), NOLIM, NULL, "under mpirun: faster ranks take more of an update's micro-batches, from measured speeds (the result does not change)", NULL},
    {"hash-every", T_I64, OFF(hash_every), 0, 1e15, 0, NULL, "N", "under mpirun: compare a hash of the parameters across ranks every N updates, repairing from rank 0; 0: never [100]", NULL},

    {"model-dir", T_STR, OFF(model_dir), NOLIM, "DIR", "checkpoints, vocabulary and loss plot go here [model]", "output"},
    {"keep", T_INT, OFF(keep), 1, 1 << 20, 0, NULL, "N", "keep the last N checkpoints, and best.safetensors [5]", NULL},
    {"valid-every", T_I64, OFF(valid_every), 1, 1e15, 0, NULL, "N", "validate and save a checkpoint every N updates [1000]", NULL},
    {"valid-bleu", T_I64, OFF(valid_bleu), 0, 1e15, 0, NULL, "N", "every N updates also the greedy BLEU of the validation set, by sacrebleu (python3, or $RELCL_PYTHON); 0: never [0]", NULL},
    {"early-stopping", T_INT, OFF(early_stopping), 0, 1 << 20, 0, NULL, "N", "stop when validation loss has not improved N times in a row; 0: never [0]", NULL},
    {"log-every", T_I64, OFF(log_every), 1, 1e15, 0, NULL, "N", "print a training line every N updates [100]", NULL},
    {"log-json", T_STR, OFF(log_json), NOLIM, "FILE", "append one JSON object per log line (training: step, loss; validation: step, valid_loss)", NULL},

    {"config", T_MODE, OFF(config_file), NOLIM, "FILE", "read options from a YAML or JSON file (a flat mapping of these names); flags override it", "other"},
    {"dump-config", T_MODE, OFF(dump_config), NOLIM, NULL, "print the full resolved configuration as JSON and exit", NULL},
    {"resume", T_MODE, OFF(resume), NOLIM, NULL, "continue from the newest valid checkpoint in --model-dir, exactly", NULL},
    {"translate", T_MODE, OFF(translate), NOLIM, "FILE", "no training: translate FILE's lines greedily with --model-dir's best (else newest) checkpoint, '-' for stdin", NULL},
    {"help", T_MODE, OFF(help), NOLIM, NULL, "this text", NULL},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

/* mode flags with a META take a string (--config FILE, --translate FILE) */
static bool takes_value(const opt *o) {
  return o->type != T_BOOL && !(o->type == T_MODE && o->meta == NULL);
}

/* ---- small helpers ---- */

static void say(char *err, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, size, fmt, ap);
  va_end(ap);
}

static char *xstrdup(const char *s) {
  if (s == NULL) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static void set_str(char **field, const char *value) {
  free(*field);
  *field = xstrdup(value);
}

/* A name from a file or a flag: '_' and '-' are the same. */
static const opt *find_opt(const char *name, size_t len) {
  for (size_t i = 0; i < N_OPTIONS; i++) {
    const char *a = options[i].name;
    if (strlen(a) != len) continue;
    size_t j = 0;
    while (j < len && (a[j] == name[j] || (a[j] == '-' && name[j] == '_'))) j++;
    if (j == len) return &options[i];
  }
  return NULL;
}

static bool parse_bool(const char *s, int *out) {
  static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
  for (int i = 0; i < 4; i++) {
    if (strcmp(s, yes[i]) == 0) return *out = 1, true;
    if (strcmp(s, no[i]) == 0) return *out = 0, true;
  }
  return false;
}

static bool choice_ok(const char *choices, const char *s) {
  size_t n = strlen(s);
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncmp(p, s, n) == 0) return true;
    p += len + (bar != NULL);
  }
  return false;
}

/* Shortest decimal that reads back as the same double. */
static void fmt_real(char *buf, size_t size, double v) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, size, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) return;
  }
}

/* Same for a float (the model config's fields). */
static void fmt_float(char *buf, size_t size, float v) {
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(buf, size, "%.*g", prec, (double)v);
    if (strtof(buf, NULL) == v) return;
  }
}

/* Set option o of cfg from text. where: "--d-model" or "FILE:LINE: d-model". is_null: the
 * file said null (unsets a string). Returns 0 or 2 with err set. */
static int set_value(train_config *cfg, const opt *o, const char *text, bool is_null,
                     const char *where, char *err, size_t errsize) {
  char *base = (char *)cfg;
  if (is_null) {
    if (o->type == T_STR) {
      set_str((char **)(base + o->off), NULL);
      return 0;
    }
    say(err, errsize, "%s: a value is needed, got null", where);
    return 2;
  }
  switch (o->type) {
  case T_STR:
  case T_MODE:
    if (o->type == T_MODE && o->meta == NULL) break;
    if (text[0] == '\0') {
      say(err, errsize, "%s: empty value", where);
      return 2;
    }
    set_str((char **)(base + o->off), text);
    return 0;
  case T_CHOICE:
    if (!choice_ok(o->choices, text)) {
      say(err, errsize, "%s: expected one of %s, got '%s'", where, o->choices, text);
      return 2;
    }
    set_str((char **)(base + o->off), text);
    return 0;
  case T_BOOL: {
    int b;
    if (!parse_bool(text, &b)) {
      say(err, errsize, "%s: expected true or false, got '%s'", where, text);
      return 2;
    }
    *(int *)(base + o->off) = b;
    return 0;
  }
  case T_INT:
  case T_I64:
  case T_LAYERS:
  case T_U64: {
    char *end = NULL;
    errno = 0;
    bool ok;
    long long v = 0;
    unsigned long long u = 0;
    if (o->type == T_U64) {
      ok = text[0] >= '0' && text[0] <= '9';
      u = strtoull(text, &end, 10);
    } else {
      v = strtoll(text, &end, 10);
      ok = text[0] != '\0' && text[0] != ' ';
    }
    ok = ok && errno == 0 && end && *end == '\0';
    if (!ok) {
      say(err, errsize, "%s: expected %s, got '%s'", where,
          o->type == T_U64 ? "a non-negative integer" : "an integer", text);
      return 2;
    }
    if (o->type == T_U64) {
      *(uint64_t *)(base + o->off) = u;
      return 0;
    }
    if ((double)v < o->min || (double)v > o->max) {
      say(err, errsize, "%s: %lld is out of range [%.0f, %.0f]", where, v, o->min, o->max);
      return 2;
    }
    if (o->type == T_LAYERS) {
      cfg->enc_layers = cfg->dec_layers = (int)v;
    } else if (o->type == T_INT) {
      *(int *)(base + o->off) = (int)v;
    } else {
      *(int64_t *)(base + o->off) = v;
    }
    return 0;
  }
  case T_REAL: {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (text[0] == '\0' || errno != 0 || !end || *end != '\0' || !isfinite(v)) {
      say(err, errsize, "%s: expected a number, got '%s'", where, text);
      return 2;
    }
    if (v < o->min || (o->max_open ? v >= o->max : v > o->max)) {
      char lo[32], hi[32];
      fmt_real(lo, sizeof lo, o->min);
      fmt_real(hi, sizeof hi, o->max);
      say(err, errsize, "%s: %s is out of range [%s, %s%c", where, text, lo, hi,
          o->max_open ? ')' : ']');
      return 2;
    }
    *(double *)(base + o->off) = v;
    return 0;
  }
  }
  say(err, errsize, "%s: not allowed in a config file", where);
  return 2;
}

/* ---- settings: (option, value) pairs in the order given ---- */

typedef struct setting {
  const opt *o;
  char *value;
  bool is_null;
  char where[320];
} setting;

typedef struct settings {
  setting *v;
  size_t n, cap;
} settings;

static int add_setting(settings *s, const opt *o, const char *value, bool is_null,
                       const char *where) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    setting *v = realloc(s->v, cap * sizeof *v);
    if (!v) return -1;
    s->v = v;
    s->cap = cap;
  }
  setting *e = &s->v[s->n];
  e->o = o;
  e->value = xstrdup(value ? value : "");
  e->is_null = is_null;
  snprintf(e->where, sizeof e->where, "%s", where);
  if (!e->value) return -1;
  s->n++;
  return 0;
}

static void free_settings(settings *s) {
  for (size_t i = 0; i < s->n; i++) free(s->v[i].value);
  free(s->v);
  s->v = NULL;
  s->n = s->cap = 0;
}

/* ---- config files ---- */

/* A flat mapping of a few dozen options is a few kB; the limit makes /dev/zero or a wrong
 * path a clear error rather than an allocation failure. */
#define MAX_CONFIG_BYTES ((size_t)1 << 20)

static char *read_file(const char *path, size_t *len, char *err, size_t errsize) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    say(err, errsize, "--config: %s: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (n > MAX_CONFIG_BYTES) {
      fclose(f);
      free(buf);
      say(err, errsize, "--config: %s: larger than %zu kB, not a config file", path,
          MAX_CONFIG_BYTES >> 10);
      return NULL;
    }
    if (n + 1 >= cap) {
      char *b = realloc(buf, cap *= 2);
      if (!b) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = b;
    }
    size_t got = fread(buf + n, 1, cap - 1 - n, f);
    n += got;
    if (got == 0) break;
  }
  bool bad = ferror(f);
  fclose(f);
  if (!buf || bad) {
    free(buf);
    say(err, errsize, "--config: %s: cannot read the file", path);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

static int add_file_key(settings *s, const char *path, size_t line, const char *key,
                        const char *value, bool is_null, char *err, size_t errsize) {
  char where[320];
  if (line) snprintf(where, sizeof where, "%s:%zu: %s", path, line, key);
  else snprintf(where, sizeof where, "%s: %s", path, key);
  const opt *o = find_opt(key, strlen(key));
  if (!o) {
    say(err, errsize, "%s: unknown option (see --help)", where);
    return 2;
  }
  if (o->type == T_MODE) {
    say(err, errsize, "%s: only allowed on the command line", where);
    return 2;
  }
  /* once each, whatever the spelling: which of two values wins would be a guess */
  for (size_t i = 0; i < s->n; i++)
    if (s->v[i].o == o) {
      say(err, errsize, "%s: the same option as %s; set it once", where, s->v[i].where);
      return 2;
    }
  if (add_setting(s, o, value, is_null, where) != 0) {
    say(err, errsize, "out of memory");
    return 2;
  }
  return 0;
}

/* The line of each key of the top-level object of valid JSON text, in order (cJSON keeps
 * no positions); malloc'ed, NULL when out of memory. */
static size_t *json_key_lines(const char *text, size_t n_keys) {
  size_t *lines = calloc(n_keys + 1, sizeof *lines), k = 0, line = 1;
  int depth = 0;
  bool expect_key = false;
  for (const char *p = text; lines && *p && k < n_keys; p++) {
    if (*p == '\n') line++;
    else if (*p == '{' || *p == '[') depth++, expect_key = depth == 1 && *p == '{';
    else if (*p == '}' || *p == ']') depth--;
    else if (*p == ',' && depth == 1) expect_key = true;
    else if (*p == '"') {
      if (expect_key) lines[k++] = line;
      expect_key = false;
      for (p++; *p && *p != '"'; p++) /* strings hold no raw newline in valid JSON */
        if (*p == '\\' && p[1]) p++;
      if (!*p) break;
    }
  }
  return lines;
}

static int parse_json_file(const char *path, const char *text, settings *s, char *err,
                           size_t errsize) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    size_t line = 1;
    for (const char *p = text; at && p < at; p++) line += *p == '\n';
    say(err, errsize, "%s:%zu: invalid JSON", path, line);
    return 2;
  }
  int rc = 0;
  if (!cJSON_IsObject(root)) {
    say(err, errsize, "%s: expected a JSON object of options", path);
    rc = 2;
  }
  size_t *lines = rc == 0 ? json_key_lines(text, (size_t)cJSON_GetArraySize(root)) : NULL, k = 0;
  if (rc == 0 && lines == NULL) {
    say(err, errsize, "out of memory");
    rc = 2;
  }
  for (cJSON *it = root->child; rc == 0 && it; it = it->next, k++) {
    char buf[64];
    const char *value = NULL;
    bool is_null = false;
    if (cJSON_IsString(it)) {
      value = it->valuestring;
    } else if (cJSON_IsBool(it)) {
      value = cJSON_IsTrue(it) ? "true" : "false";
    } else if (cJSON_IsNumber(it)) {
      double d = it->valuedouble;
      /* integers exactly (a seed may exceed 2^53 only as a string) */
      if (d == floor(d) && fabs(d) < 9.2e18) snprintf(buf, sizeof buf, "%.0f", d);
      else fmt_real(buf, sizeof buf, d);
      value = buf;
    } else if (cJSON_IsNull(it)) {
      is_null = true;
    } else {
      say(err, errsize, "%s: %s: expected a single value, not a list or object", path,
          it->string);
      rc = 2;
      break;
    }
    rc = add_file_key(s, path, lines[k], it->string, value, is_null, err, errsize);
  }
  free(lines);
  cJSON_Delete(root);
  return rc;
}

static int parse_yaml_file(const char *path, const char *text, size_t len, settings *s,
                           char *err, size_t errsize) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) {
    say(err, errsize, "out of memory");
    return 2;
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  int rc = 0, depth = 0;
  bool done = false, seen_map = false;
  char *key = NULL;
  size_t key_line = 0;
  while (!done && rc == 0) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&parser, &ev)) {
      say(err, errsize, "%s:%zu: invalid YAML: %s", path, parser.problem_mark.line + 1,
          parser.problem ? parser.problem : "parse error");
      rc = 2;
      break;
    }
    size_t line = ev.start_mark.line + 1;
    switch (ev.type) {
    case YAML_STREAM_END_EVENT:
      done = true;
      break;
    case YAML_MAPPING_START_EVENT:
      if (depth == 0 && !seen_map) {
        depth = 1;
        seen_map = true;
      } else {
        say(err, errsize, "%s:%zu: %s%sexpected a single value, not a mapping", path, line,
            key ? key : "", key ? ": " : "");
        rc = 2;
      }
      break;
    case YAML_SEQUENCE_START_EVENT:
      say(err, errsize, "%s:%zu: %s%sexpected a single value, not a list", path, line,
          key ? key : "", key ? ": " : "");
      rc = 2;
      break;
    case YAML_MAPPING_END_EVENT:
      depth = 0;
      break;
    case YAML_ALIAS_EVENT:
      say(err, errsize, "%s:%zu: aliases are not supported", path, line);
      rc = 2;
      break;
    case YAML_SCALAR_EVENT: {
      const char *v = (const char *)ev.data.scalar.value;
      if (depth == 0) {
        /* a document that is one scalar: empty files parse as nothing at all */
        say(err, errsize, "%s:%zu: expected a mapping of options (key: value)", path, line);
        rc = 2;
      } else if (!key) {
        key = xstrdup(v);
        key_line = line;
      } else {
        bool plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        bool is_null = plain && (strcmp(v, "") == 0 || strcmp(v, "~") == 0 ||
                                 strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
                                 strcmp(v, "NULL") == 0);
        rc = add_file_key(s, path, key_line, key, v, is_null, err, errsize);
        free(key);
        key = NULL;
      }
      break;
    }
    default:
      break;
    }
    yaml_event_delete(&ev);
  }
  free(key);
  yaml_parser_delete(&parser);
  return rc;
}

static int parse_config_file(const char *path, settings *s, char *err, size_t errsize) {
  size_t len = 0;
  char *text = read_file(path, &len, err, errsize);
  if (!text) return 2;
  if (memchr(text, '\0', len)) {
    free(text);
    say(err, errsize, "%s: NUL byte in a config file", path);
    return 2;
  }
  const char *dot = strrchr(path, '.');
  const char *p = text;
  while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
  bool json = (dot && strcmp(dot, ".json") == 0) ||
              (!(dot && (strcmp(dot, ".yaml") == 0 || strcmp(dot, ".yml") == 0)) && *p == '{');
  int rc = json ? parse_json_file(path, text, s, err, errsize)
                : parse_yaml_file(path, text, len, s, err, errsize);
  free(text);
  return rc;
}

/* ---- resolution ---- */

static void set_defaults(train_config *c) {
  memset(c, 0, sizeof *c);
  c->vocab_size = 8000;
  c->preset = xstrdup("base");
  c->positions = xstrdup("relative");
  c->label_smoothing = 0.1;
  c->batch_tokens = 4096;
  c->accum = 1;
  c->max_length = 128;
  c->warmup = 4000;
  c->lr_scale = 1;
  c->seed = 1;
  c->model_dir = xstrdup("model");
  c->keep = 5;
  c->valid_every = 1000;
  c->log_every = 100;
  c->hash_every = 100;
}

static const char *positions_name(relcl_positions p) {
  return p == RELCL_POS_ABSOLUTE ? "absolute" : p == RELCL_POS_BOTH ? "both" : "relative";
}

/* 0.1f as 0.1, not 0.10000000149011612: the value a person would have written */
static double float_as_written(float v) {
  char buf[32];
  fmt_float(buf, sizeof buf, v);
  return strtod(buf, NULL);
}

static int apply_preset(train_config *c, const char *name, char *err, size_t errsize) {
  const relcl_model_config *p = relcl_model_preset(name);
  if (!p) {
    say(err, errsize, "--preset: the library knows no preset '%s'", name);
    return 2;
  }
  c->enc_layers = p->enc_layers;
  c->dec_layers = p->dec_layers;
  c->d_model = p->d_model;
  c->heads = p->heads;
  c->d_ff = p->d_ff;
  c->dropout = float_as_written(p->dropout);
  c->label_smoothing = float_as_written(p->label_smoothing);
  set_str(&c->positions, positions_name(p->positions));
  c->max_rel = p->max_rel;
  c->rel_per_head = p->rel_per_head;
  c->rel_keys_only = p->rel_keys_only;
  c->pre_norm = p->pre_norm;
  return 0;
}

static int check_config(const train_config *c, char *err, size_t errsize) {
  if (c->d_model % c->heads != 0) {
    say(err, errsize, "--d-model %d is not divisible by --heads %d", c->d_model, c->heads);
    return 2;
  }
  if (c->batch_tokens < (int64_t)c->max_length + 1) {
    say(err, errsize,
        "--batch-tokens %" PRId64 " is below --max-length + 1 (%d): the longest pair would "
        "fit in no batch",
        c->batch_tokens, c->max_length + 1);
    return 2;
  }
  if (c->dump_config || c->help || c->translate) return 0;
  if (!c->train_src || !c->train_tgt) {
    say(err, errsize, "%s is required (see --help)", !c->train_src ? "--train-src" : "--train-tgt");
    return 2;
  }
  if (!c->valid_src != !c->valid_tgt) {
    say(err, errsize, "%s is given without %s", c->valid_src ? "--valid-src" : "--valid-tgt",
        c->valid_src ? "--valid-tgt" : "--valid-src");
    return 2;
  }
  if (c->valid_bleu > 0 && !c->valid_src) {
    say(err, errsize, "--valid-bleu needs --valid-src and --valid-tgt");
    return 2;
  }
  return 0;
}

int train_config_parse(train_config *cfg, int argc, char **argv, char *err, size_t errsize) {
  set_defaults(cfg);
  settings flags = {0}, file = {0};
  int rc = 0;
  err[0] = '\0';
  for (int i = 1; i < argc && rc == 0; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0) a = "--help";
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
      say(err, errsize, "unexpected argument '%s' (options start with --; see --help)", a);
      rc = 2;
      break;
    }
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const opt *o = find_opt(name, len);
    bool negated = false;
    if (!o && len > 3 && strncmp(name, "no-", 3) == 0) {
      o = find_opt(name + 3, len - 3);
      if (o && o->type != T_BOOL) o = NULL;
      negated = o != NULL;
    }
    /* flags are spelled with '-' only */
    if (!o || memchr(name, '_', len)) {
      say(err, errsize, "unknown option '--%.*s' (see --help)", (int)len, name);
      rc = 2;
      break;
    }
    char where[160];
    snprintf(where, sizeof where, "--%s", o->name);
    const char *value = NULL;
    if (negated) {
      if (eq) {
        say(err, errsize, "--no-%s takes no value", o->name);
        rc = 2;
        break;
      }
      value = "false";
    } else if (takes_value(o)) {
      if (eq) {
        value = eq + 1;
      } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
        value = argv[++i];
      } else {
        say(err, errsize, "--%s needs a value%s", o->name,
            i + 1 < argc ? " (the next argument is an option)" : "");
        rc = 2;
        break;
      }
    } else if (o->type == T_BOOL) {
      value = eq ? eq + 1 : "true";
    } else { /* a mode flag */
      if (eq) {
        say(err, errsize, "--%s takes no value", o->name);
        rc = 2;
        break;
      }
      *(int *)((char *)cfg + o->off) = 1;
      continue;
    }
    if (o->type == T_MODE) { /* --config FILE, --translate FILE */
      rc = set_value(cfg, o, value, false, where, err, errsize);
      continue;
    }
    if (add_setting(&flags, o, value, false, where) != 0) {
      say(err, errsize, "out of memory");
      rc = 2;
    }
  }
  if (rc == 0 && cfg->help) goto done;
  if (rc == 0 && cfg->config_file) rc = parse_config_file(cfg->config_file, &file, err, errsize);
  /* the preset first, from the flags or else the file, then everything else in order */
  const setting *preset = NULL;
  for (size_t i = 0; rc == 0 && i < file.n; i++)
    if (strcmp(file.v[i].o->name, "preset") == 0) preset = &file.v[i];
  for (size_t i = 0; rc == 0 && i < flags.n; i++)
    if (strcmp(flags.v[i].o->name, "preset") == 0) preset = &flags.v[i];
  if (rc == 0 && preset)
    rc = set_value(cfg, preset->o, preset->value, preset->is_null, preset->where, err, errsize);
  if (rc == 0) rc = apply_preset(cfg, cfg->preset, err, errsize);
  for (size_t i = 0; rc == 0 && i < file.n; i++)
    rc = set_value(cfg, file.v[i].o, file.v[i].value, file.v[i].is_null, file.v[i].where, err,
                   errsize);
  for (size_t i = 0; rc == 0 && i < flags.n; i++)
    rc = set_value(cfg, flags.v[i].o, flags.v[i].value, false, flags.v[i].where, err, errsize);
  if (rc == 0) rc = check_config(cfg, err, errsize);
done:
  free_settings(&flags);
  free_settings(&file);
  return rc;
}

void train_config_free(train_config *cfg) {
  if (!cfg) return;
  for (size_t i = 0; i < N_OPTIONS; i++) {
    const opt *o = &options[i];
    bool str = o->type == T_STR || o->type == T_CHOICE || (o->type == T_MODE && o->meta);
    if (str) {
      free(*(char **)((char *)cfg + o->off));
      *(char **)((char *)cfg + o->off) = NULL;
    }
  }
}

/* ---- output ---- */

/* An integer option as a JSON number, exactly: int64 values past 2^53 would lose digits as
 * cJSON's double; the seed beyond 2^53 is a string, which --config reads back too. */
static cJSON *json_integer(int64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%" PRId64, v);
  return cJSON_CreateRaw(buf);
}

char *train_config_json(const train_config *cfg, int pretty) {
  cJSON *root = cJSON_CreateObject();
  const char *base = (const char *)cfg;
  bool ok = root != NULL;
  for (size_t i = 0; ok && i < N_OPTIONS; i++) {
    const opt *o = &options[i];
    if (o->type == T_MODE || o->type == T_LAYERS) continue;
    const void *f = base + o->off;
    cJSON *v = NULL;
    switch (o->type) {
    case T_STR:
    case T_CHOICE:
      v = *(char *const *)f ? cJSON_CreateString(*(char *const *)f) : cJSON_CreateNull();
      break;
    case T_INT:
      v = cJSON_CreateNumber(*(const int *)f);
      break;
    case T_I64:
      v = json_integer(*(const int64_t *)f);
      break;
    case T_U64: {
      uint64_t u = *(const uint64_t *)f;
      char buf[32];
      snprintf(buf, sizeof buf, "%" PRIu64, u);
      v = u > (1ull << 53) ? cJSON_CreateString(buf) : cJSON_CreateRaw(buf);
      break;
    }
    case T_REAL:
      v = cJSON_CreateNumber(*(const double *)f);
      break;
    case T_BOOL:
      v = cJSON_CreateBool(*(const int *)f != 0);
      break;
    default:
      break;
    }
    ok = v != NULL && cJSON_AddItemToObject(root, o->name, v);
    if (v != NULL && !ok) cJSON_Delete(v);
  }
  char *s = ok ? (pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root)) : NULL;
  cJSON_Delete(root);
  if (s == NULL || !pretty) return s;
  /* cJSON indents with tabs, which YAML forbids: two spaces, "key": value, a final newline.
   * Every tab is layout (cJSON writes a tab inside a string as \t). */
  size_t n = strlen(s), tabs = 0;
  for (size_t i = 0; i < n; i++) tabs += s[i] == '\t';
  char *out = malloc(n + tabs + 2), *q = out;
  if (out != NULL) {
    for (size_t i = 0; i < n; i++) {
      if (s[i] != '\t') *q++ = s[i];
      else if (i > 0 && s[i - 1] == ':') *q++ = ' ';
      else *q++ = ' ', *q++ = ' ';
    }
    *q++ = '\n';
    *q = '\0';
  }
  cJSON_free(s);
  return out;
}

void train_config_usage(FILE *out, const char *prog) {
  fprintf(out,
          "usage: %s --train-src FILE --train-tgt FILE [--valid-src FILE --valid-tgt FILE]\n"
          "       [--preset tiny|base|big] [options]\n"
          "Trains an encoder-decoder Transformer with relative position representations on an\n"
          "OpenCL device. Values may follow the flag or an '=' (--d-model=256); a boolean flag\n"
          "alone means true, --no-FLAG false. Exit status: 0 done, 1 runtime error, 2 usage error.\n",
          prog);
  for (size_t i = 0; i < N_OPTIONS; i++) {
    const opt *o = &options[i];
    if (o->section) fprintf(out, "\n%s:\n", o->section);
    char left[64];
    snprintf(left, sizeof left, "--%s%s%s", o->name, o->meta ? " " : "", o->meta ? o->meta : "");
    fprintf(out, "  %-28s %s\n", left, o->help);
  }
  fprintf(out,
          "\nEvery option but those under 'other' may be set in the --config file, as\n"
          "'d-model: 256' (YAML) or {\"d-model\": 256} (JSON); '_' may stand for '-'.\n");
}

void train_config_model(const train_config *cfg, int vocab, relcl_model_config *m) {
  memset(m, 0, sizeof *m);
  m->vocab = vocab;
  m->enc_layers = cfg->enc_layers;
  m->dec_layers = cfg->dec_layers;
  m->d_model = cfg->d_model;
  m->heads = cfg->heads;
  m->d_ff = cfg->d_ff;
  m->dropout = (float)cfg->dropout;
  m->label_smoothing = (float)cfg->label_smoothing;
  m->positions = strcmp(cfg->positions, "absolute") == 0 ? RELCL_POS_ABSOLUTE
                 : strcmp(cfg->positions, "both") == 0   ? RELCL_POS_BOTH
                                                         : RELCL_POS_RELATIVE;
  m->max_rel = cfg->max_rel;
  m->rel_per_head = cfg->rel_per_head;
  m->rel_keys_only = cfg->rel_keys_only;
  m->pre_norm = cfg->pre_norm;
  m->max_length = cfg->max_length + 1; /* a side plus its BOS or EOS */
}
