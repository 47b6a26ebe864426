/* Saving and loading a model: its configuration as JSON ("relcl.config", cJSON both ways,
 * read strictly because decoders allocate by these numbers), its parameters and optionally
 * the Adam state as a relcl checkpoint (lib/checkpoint.c does the file). Every app saves and
 * loads through here, so the file layout and its checks exist once. */
#include "model_internal.h"
#include "relcl_checkpoint.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADAM_M_PREFIX "adam_m/"
#define ADAM_V_PREFIX "adam_v/" /* as long as ADAM_M_PREFIX */

/* ---- the configuration's JSON ---- */

typedef enum field_type { F_INT, F_BOOL, F_REAL, F_POSITIONS, F_HASH } field_type;

/* One key of "relcl.config". Ranges are what the library and its decoders accept: integers
 * in [lo, hi], reals in [lo, hi). */
typedef struct field {
  const char *key;
  field_type type;
  size_t off; /* in relcl_model_config; unused for F_HASH */
  double lo, hi;
} field;

#define OFF(f) offsetof(relcl_model_config, f)
static const field fields[] = {
    {"vocab", F_INT, OFF(vocab), 5, 1 << 24},
    {"vocab-fnv1a64", F_HASH, 0, 0, 0},
    {"enc-layers", F_INT, OFF(enc_layers), 1, RELCL_MODEL_MAX_LAYERS},
    {"dec-layers", F_INT, OFF(dec_layers), 1, RELCL_MODEL_MAX_LAYERS},
    {"d-model", F_INT, OFF(d_model), 1, 65536},
    {"heads", F_INT, OFF(heads), 1, 1024},
    {"d-ff", F_INT, OFF(d_ff), 1, 1 << 20},
    {"dropout", F_REAL, OFF(dropout), 0, 1},
    {"label-smoothing", F_REAL, OFF(label_smoothing), 0, 1},
    {"positions", F_POSITIONS, OFF(positions), 0, 0},
    {"max-relative-position", F_INT, OFF(max_rel), 0, 4096},
    {"relative-per-head", F_BOOL, OFF(rel_per_head), 0, 0},
    {"relative-keys-only", F_BOOL, OFF(rel_keys_only), 0, 0},
    {"pre-norm", F_BOOL, OFF(pre_norm), 0, 0},
    {"max-length", F_INT, OFF(max_length), 1, RELCL_MODEL_MAX_LENGTH},
};
#undef OFF
enum { N_FIELDS = sizeof fields / sizeof fields[0] };

static const char *positions_name(relcl_positions p) {
  switch (p) {
  case RELCL_POS_ABSOLUTE:
    return "absolute";
  case RELCL_POS_RELATIVE:
    return "relative";
  case RELCL_POS_BOTH:
    return "both";
  }
  return NULL;
}

/* The double whose shortest decimal form is that of the float, so that 0.1f is written 0.1
 * (cJSON prints the shortest form of a double that reads back exactly). */
static double float_as_written(float v) {
  char buf[32];
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
    if (strtof(buf, NULL) == v) break;
  }
  return strtod(buf, NULL);
}

relcl_status relcl_model_config_to_json(const relcl_model_config *cfg, uint64_t vocab_hash,
                                        char **out) {
  relcl__clear_error();
  if (out == NULL || cfg == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_config_to_json: cfg and out are required");
  *out = NULL;
  if (positions_name(cfg->positions) == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_config_to_json: positions=%d unknown",
                       (int)cfg->positions);
  cJSON *root = cJSON_CreateObject();
  bool ok = root != NULL;
  const char *base = (const char *)cfg;
  for (size_t i = 0; ok && i < N_FIELDS; i++) {
    const field *f = &fields[i];
    const void *p = base + f->off;
    char hex[17];
    cJSON *v = NULL;
    switch (f->type) {
    case F_INT:
      /* what could not be read back is not written: a saved model must load */
      if (!(*(const int *)p >= f->lo && *(const int *)p <= f->hi)) {
        cJSON_Delete(root);
        return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_config_to_json: \"%s\" is %d, "
                           "out of range [%.0f, %.0f]", f->key, *(const int *)p, f->lo, f->hi);
      }
      v = cJSON_CreateNumber(*(const int *)p);
      break;
    case F_BOOL:
      v = cJSON_CreateBool(*(const int *)p != 0);
      break;
    case F_REAL:
      v = cJSON_CreateNumber(float_as_written(*(const float *)p));
      break;
    case F_POSITIONS:
      v = cJSON_CreateString(positions_name(*(const relcl_positions *)p));
      break;
    case F_HASH:
      snprintf(hex, sizeof hex, "%016" PRIx64, vocab_hash);
      v = cJSON_CreateString(hex);
      break;
    }
    ok = v != NULL && cJSON_AddItemToObject(root, f->key, v);
    if (v != NULL && !ok) cJSON_Delete(v);
  }
  char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (s == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  *out = s;
  return RELCL_OK;
}

#define BAD(...) relcl__fail(RELCL_ERR_FORMAT, RELCL_CHECKPOINT_CONFIG_KEY ": " __VA_ARGS__)

/* One value into cfg (or *hash), checked against its field. */
static relcl_status read_field(const field *f, const cJSON *v, relcl_model_config *cfg,
                               uint64_t *hash) {
  char *base = (char *)cfg;
  void *p = base + f->off;
  switch (f->type) {
  case F_INT: {
    if (!cJSON_IsNumber(v)) return BAD("\"%s\" must be an integer", f->key);
    double d = v->valuedouble;
    if (d != floor(d)) return BAD("\"%s\" must be an integer, got %.17g", f->key, d);
    if (!(d >= f->lo && d <= f->hi))
      return BAD("\"%s\" is %.17g, out of range [%.0f, %.0f]", f->key, d, f->lo, f->hi);
    *(int *)p = (int)d;
    return RELCL_OK;
  }
  case F_BOOL:
    if (!cJSON_IsBool(v)) return BAD("\"%s\" must be true or false", f->key);
    *(int *)p = cJSON_IsTrue(v) ? 1 : 0;
    return RELCL_OK;
  case F_REAL: {
    if (!cJSON_IsNumber(v)) return BAD("\"%s\" must be a number", f->key);
    double d = v->valuedouble;
    if (!(d >= f->lo && d < f->hi))
      return BAD("\"%s\" is %.17g, out of range [%g, %g)", f->key, d, f->lo, f->hi);
    *(float *)p = (float)d;
    return RELCL_OK;
  }
  case F_POSITIONS: {
    const char *s = cJSON_IsString(v) ? v->valuestring : "";
    relcl_positions k = strcmp(s, "absolute") == 0   ? RELCL_POS_ABSOLUTE
                        : strcmp(s, "relative") == 0 ? RELCL_POS_RELATIVE
                        : strcmp(s, "both") == 0     ? RELCL_POS_BOTH
                                                     : (relcl_positions)0;
    if (k == 0) return BAD("\"%s\" must be \"absolute\", \"relative\" or \"both\"", f->key);
    *(relcl_positions *)p = k;
    return RELCL_OK;
  }
  case F_HASH: {
    const char *s = cJSON_IsString(v) ? v->valuestring : "";
    bool ok = strlen(s) == 16;
    for (size_t i = 0; ok && i < 16; i++)
      ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
    if (!ok) return BAD("\"%s\" must be 16 lowercase hex digits", f->key);
    if (hash) *hash = strtoull(s, NULL, 16);
    return RELCL_OK;
  }
  }
  return BAD("\"%s\": unknown field type", f->key);
}

relcl_status relcl_model_config_from_json(const char *json, relcl_model_config *cfg,
                                          uint64_t *vocab_hash) {
  relcl__clear_error();
  if (json == NULL || cfg == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "relcl_model_config_from_json: json and cfg are required");
  relcl_model_config c;
  memset(&c, 0, sizeof c);
  uint64_t hash = 0;
  bool seen[N_FIELDS] = {false};
  relcl_status st = RELCL_OK;
  cJSON *root = cJSON_ParseWithOpts(json, NULL, 1); /* 1: nothing may follow the object */
  const cJSON *v;
  /* cJSON ends a string at an escaped NUL, so "vocab\u0000x" would read as "vocab" */
  if (strstr(json, "\\u0000") != NULL) {
    st = BAD("a key or value holds a NUL character (\\u0000)");
    goto done;
  }
  if (!cJSON_IsObject(root)) {
    st = BAD("not a JSON object");
    goto done;
  }
  cJSON_ArrayForEach(v, root) {
    size_t i = 0;
    while (i < N_FIELDS && strcmp(fields[i].key, v->string) != 0) i++;
    if (i == N_FIELDS) {
      st = BAD("unknown key \"%s\"", v->string);
      goto done;
    }
    if (seen[i]) {
      st = BAD("\"%s\" is given twice", v->string);
      goto done;
    }
    seen[i] = true;
    if ((st = read_field(&fields[i], v, &c, &hash)) != RELCL_OK) goto done;
  }
  for (size_t i = 0; i < N_FIELDS; i++)
    if (!seen[i]) {
      st = BAD("\"%s\" is missing", fields[i].key);
      goto done;
    }
  *cfg = c;
  if (vocab_hash) *vocab_hash = hash;
done:
  cJSON_Delete(root);
  return st;
}
#undef BAD

/* The current message with "PATH: " in front (the message buffer cannot be its own
 * argument). */
static relcl_status with_path(relcl_status st, const char *path) {
  char msg[2048];
  snprintf(msg, sizeof msg, "%s", relcl_last_error());
  return relcl__fail(st, "%s: %s", path, msg);
}

relcl_status relcl_model_checkpoint_config(const relcl_checkpoint *ck, relcl_model_config *cfg,
                                           uint64_t *vocab_hash) {
  relcl__clear_error();
  if (ck == NULL || cfg == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "relcl_model_checkpoint_config: ck and cfg are required");
  const char *path = relcl_checkpoint_path(ck);
  const char *json = relcl_checkpoint_meta_get(ck, RELCL_CHECKPOINT_CONFIG_KEY);
  if (json == NULL)
    return relcl__fail(RELCL_ERR_FORMAT, "%s: no " RELCL_CHECKPOINT_CONFIG_KEY
                       " metadata: not a relcl model", path);
  relcl_status st = relcl_model_config_from_json(json, cfg, vocab_hash);
  return st == RELCL_OK ? st : with_path(st, path);
}

int relcl_model_config_compatible(const relcl_model_config *have, const relcl_model_config *want,
                                  char *why, size_t size) {
  for (size_t i = 0; i < N_FIELDS; i++) {
    const field *f = &fields[i];
    if (f->type == F_REAL || f->type == F_HASH || strcmp(f->key, "max-length") == 0) continue;
    int a = *(const int *)((const char *)have + f->off);
    int b = *(const int *)((const char *)want + f->off);
    if (a == b) continue;
    if (why != NULL && size > 0) {
      if (f->type == F_BOOL)
        snprintf(why, size, "%s %s, not %s", f->key, a ? "true" : "false", b ? "true" : "false");
      else if (f->type == F_POSITIONS)
        snprintf(why, size, "%s %s, not %s", f->key, positions_name((relcl_positions)a),
                 positions_name((relcl_positions)b));
      else snprintf(why, size, "%s %d, not %d", f->key, a, b);
    }
    return 0;
  }
  if (why != NULL && size > 0) why[0] = '\0';
  return 1;
}

/* ---- parameters and optimizer state ---- */

relcl_status relcl_model_save(relcl_model *m, const char *path,
                              const relcl_model_save_opts *opts) {
  relcl__clear_error();
  if (m == NULL || path == NULL || opts == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_save: model, path and opts are required");
  if (opts->n_meta > 0 && opts->meta == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_save: n_meta > 0 without meta");
  for (size_t i = 0; i < opts->n_meta; i++)
    if (opts->meta[i].key != NULL && (strcmp(opts->meta[i].key, RELCL_CHECKPOINT_CONFIG_KEY) == 0 ||
                                      strcmp(opts->meta[i].key, RELCL_MODEL_ADAM_STEP_KEY) == 0))
      return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_save: metadata key %s is the "
                         "library's own", opts->meta[i].key);
  const bool optim = (opts->flags & RELCL_MODEL_OPTIMIZER) != 0;
  const int n_arenas = optim ? 3 : 1;
  const relcl_arena arenas[3] = {RELCL_ARENA_PARAMS, RELCL_ARENA_ADAM_M, RELCL_ARENA_ADAM_V};
  const char *prefix[3] = {"", ADAM_M_PREFIX, ADAM_V_PREFIX};
  const size_t nt = m->n_tensors, np = m->param_count;
  float *host = NULL;
  relcl_checkpoint_tensor *t = NULL;
  relcl_checkpoint_meta *md = NULL;
  char *names = NULL, *config = NULL;
  relcl_status st = relcl_model_config_to_json(&m->cfg, opts->vocab_hash, &config);
  if (st != RELCL_OK) goto done;
  size_t name_bytes = 0;
  for (size_t i = 0; i < nt; i++) name_bytes += strlen(m->tensors[i].name) + 8;
  host = malloc((size_t)n_arenas * np * sizeof *host);
  t = calloc((size_t)n_arenas * nt, sizeof *t);
  md = calloc(opts->n_meta + 2, sizeof *md);
  names = malloc(2 * name_bytes + 1);
  if (host == NULL || t == NULL || md == NULL || names == NULL) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "saving %s: out of host memory", path);
    goto done;
  }
  size_t used = 0;
  for (int a = 0; a < n_arenas; a++) {
    float *dst = host + (size_t)a * np;
    if ((st = relcl_model_arena_read(m, arenas[a], dst)) != RELCL_OK) goto done;
    for (size_t i = 0; i < nt; i++) {
      const relcl_tensor_info *info = &m->tensors[i];
      relcl_checkpoint_tensor *x = &t[(size_t)a * nt + i];
      x->name = info->name;
      if (a > 0) { /* "adam_m/NAME": the moments beside their parameter, named after it */
        x->name = names + used;
        used += (size_t)sprintf(names + used, "%s%s", prefix[a], info->name) + 1;
      }
      x->ndim = info->ndim;
      for (int d = 0; d < info->ndim; d++) x->shape[d] = info->shape[d];
      x->data = dst + info->offset;
    }
  }
  char step[24];
  size_t n_md = 0;
  md[n_md++] = (relcl_checkpoint_meta){RELCL_CHECKPOINT_CONFIG_KEY, config};
  if (optim) {
    snprintf(step, sizeof step, "%" PRIu64, opts->adam_step);
    md[n_md++] = (relcl_checkpoint_meta){RELCL_MODEL_ADAM_STEP_KEY, step};
  }
  for (size_t i = 0; i < opts->n_meta; i++) md[n_md++] = opts->meta[i];
  st = relcl_checkpoint_save(path, t, (size_t)n_arenas * nt, md, n_md);
done:
  free(host);
  free(t);
  free(md);
  free(names);
  free(config);
  return st;
}

/* Index of the first value of x[0..n) that is NaN or infinite, or n. */
static size_t first_nonfinite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return i;
  return n;
}

relcl_status relcl_model_restore(relcl_model *m, const relcl_checkpoint *ck, int flags,
                                 uint64_t *adam_step) {
  relcl__clear_error();
  if (m == NULL || ck == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_restore: model and ck are required");
  const char *path = relcl_checkpoint_path(ck);
  const bool optim = (flags & RELCL_MODEL_OPTIMIZER) != 0;
  const int n_arenas = optim ? 3 : 1;
  const relcl_arena arenas[3] = {RELCL_ARENA_PARAMS, RELCL_ARENA_ADAM_M, RELCL_ARENA_ADAM_V};
  const char *prefix[3] = {"", ADAM_M_PREFIX, ADAM_V_PREFIX};
  const size_t np = m->param_count;
  uint64_t step = 0;
  relcl_status st = RELCL_OK;
  if (optim) {
    const char *s = relcl_checkpoint_meta_get(ck, RELCL_MODEL_ADAM_STEP_KEY);
    char *end = NULL;
    if (s != NULL && s[0] >= '0' && s[0] <= '9') step = strtoull(s, &end, 10);
    if (end == NULL || *end != '\0')
      return relcl__fail(RELCL_ERR_FORMAT, "%s: %s " RELCL_MODEL_ADAM_STEP_KEY
                         ": saved without the optimizer state", path, s ? "bad" : "no");
  }
  /* a tensor the model does not have means another architecture than the one loaded */
  for (size_t j = 0; j < relcl_checkpoint_tensor_count(ck); j++) {
    const char *name = relcl_checkpoint_tensor_at(ck, j).name;
    if (strncmp(name, ADAM_M_PREFIX, strlen(ADAM_M_PREFIX)) == 0 ||
        strncmp(name, ADAM_V_PREFIX, strlen(ADAM_V_PREFIX)) == 0)
      name += strlen(ADAM_M_PREFIX); /* both prefixes have the same length */
    size_t i = 0;
    while (i < m->n_tensors && strcmp(m->tensors[i].name, name) != 0) i++;
    if (i == m->n_tensors)
      return relcl__fail(RELCL_ERR_FORMAT, "%s: tensor %s is not part of this model",
                         path, relcl_checkpoint_tensor_at(ck, j).name);
  }
  /* zeros between tensors (alignment padding) as relcl_model_create leaves them */
  float *host = calloc((size_t)n_arenas * np, sizeof *host);
  if (host == NULL)
    return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of host memory for %zu parameters",
                       path, np);
  /* everything is read and checked before the device is touched: a bad file changes nothing */
  for (int a = 0; a < n_arenas && st == RELCL_OK; a++) {
    for (size_t i = 0; i < m->n_tensors; i++) {
      const relcl_tensor_info *info = &m->tensors[i];
      char name[512];
      snprintf(name, sizeof name, "%s%s", prefix[a], info->name);
      float *dst = host + (size_t)a * np + info->offset;
      if ((st = relcl_checkpoint_read(ck, name, info->ndim, info->shape, dst)) != RELCL_OK)
        break;
      size_t bad = first_nonfinite(dst, info->size);
      if (bad < info->size) {
        st = relcl__fail(RELCL_ERR_FORMAT, "%s: tensor %s holds %s at element %zu: refusing a "
                         "model with non-finite values", path, name,
                         isnan(dst[bad]) ? "NaN" : "infinity", bad);
        break;
      }
    }
  }
  for (int a = 0; a < n_arenas && st == RELCL_OK; a++)
    st = relcl_model_arena_write(m, arenas[a], host + (size_t)a * np);
  free(host);
  if (st == RELCL_OK && adam_step != NULL) *adam_step = step;
  return st;
}

relcl_status relcl_model_load_checkpoint(relcl_context *ctx, const relcl_checkpoint *ck,
                                         int flags, relcl_model **out, uint64_t *vocab_hash) {
  relcl__clear_error();
  if (out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_load_checkpoint: out is NULL");
  *out = NULL;
  if (ctx == NULL || ck == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "relcl_model_load_checkpoint: ctx and ck are required");
  relcl_model_config cfg;
  uint64_t hash = 0;
  relcl_model *m = NULL;
  relcl_status st = relcl_model_checkpoint_config(ck, &cfg, &hash);
  if (st != RELCL_OK) return st;
  /* the seed does not matter: every parameter is overwritten */
  if ((st = relcl_model_create(ctx, &cfg, 0, &m)) != RELCL_OK)
    return with_path(st, relcl_checkpoint_path(ck));
  if ((st = relcl_model_restore(m, ck, flags, NULL)) != RELCL_OK) {
    relcl_model_destroy(m);
    return st;
  }
  if (vocab_hash) *vocab_hash = hash;
  *out = m;
  return RELCL_OK;
}

relcl_status relcl_model_load(relcl_context *ctx, const char *path, int flags,
                              relcl_model **out, uint64_t *vocab_hash) {
  relcl__clear_error();
  if (out == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_load: out is NULL");
  *out = NULL;
  if (path == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_load: no path");
  relcl_checkpoint *ck = NULL;
  relcl_status st = relcl_checkpoint_open(path, 0, &ck);
  if (st == RELCL_OK) st = relcl_model_load_checkpoint(ctx, ck, flags, out, vocab_hash);
  relcl_checkpoint_close(ck);
  return st;
}
