/* Saving and loading models (lib/model/model_io.c) through the public API only:
 *  1. the configuration's JSON: round trip of several configurations (every field, floats
 *     written as their shortest decimal), the form relcl-train wrote before (spaces) still
 *     read, and strictness: each broken variant of a good JSON is RELCL_ERR_FORMAT with the
 *     key's name in the message (non-integer integers, a max-length of a 512 GB decoder
 *     allocation, unknown, repeated, missing, mistyped keys, trailing text, ...);
 *  2. save and load: parameters, both Adam moments and the step come back bit for bit
 *     (exact comparison: the file holds the floats' bytes, nothing is computed); a model
 *     saved without the optimizer cannot be restored with it; another configuration's file
 *     is refused naming a tensor (one of another shape, or one the model lacks);
 *  3. bad checkpoints: a NaN or an infinity in any tensor (parameters or moments), or a
 *     relcl.config with "vocab": 500.7 or a huge "max-length", is refused naming the tensor
 *     or the key, and a refused restore leaves the model as it was.
 * Random arena contents stand in for trained ones: the code under test copies bytes.
 */
#include "relcl_model.h"
#include "testutil.h"

#include <unistd.h>

static char dir[64];

static relcl_model_config small_config(void) {
  relcl_model_config c;
  memset(&c, 0, sizeof c);
  c.vocab = 23;
  c.enc_layers = 2;
  c.dec_layers = 1;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 24;
  c.dropout = 0.1f;
  c.label_smoothing = 0.1f;
  c.positions = RELCL_POS_RELATIVE;
  c.max_rel = 3;
  c.rel_per_head = 1;
  c.max_length = 33;
  return c;
}

static int msg_has(const char *needle) { return strstr(relcl_last_error(), needle) != NULL; }

/* ---- 1. JSON ---- */

static void test_json(void) {
  relcl_model_config cs[3] = {small_config(), small_config(), small_config()};
  cs[1].positions = RELCL_POS_BOTH;
  cs[1].rel_keys_only = 1;
  cs[1].pre_norm = 1;
  cs[1].dropout = 0.3f;
  cs[1].label_smoothing = 0.0f;
  cs[2].positions = RELCL_POS_ABSOLUTE;
  cs[2].rel_per_head = 0;
  cs[2].dropout = 0.123456789f;
  cs[2].max_length = RELCL_MODEL_MAX_LENGTH;
  const uint64_t hashes[3] = {0x0123456789abcdefULL, 0, 0xffffffffffffffffULL};
  for (int i = 0; i < 3; i++) {
    char *json = NULL;
    relcl_model_config back;
    uint64_t h = 1;
    memset(&back, 0x55, sizeof back);
    relcl_status st = relcl_model_config_to_json(&cs[i], hashes[i], &json);
    int ok = st == RELCL_OK &&
             relcl_model_config_from_json(json, &back, &h) == RELCL_OK &&
             memcmp(&back, &cs[i], sizeof back) == 0 && h == hashes[i];
    tu_check(ok, "config JSON round trip %d: %s", i, json ? json : relcl_last_error());
    free(json);
  }
  char *json = NULL;
  TU_OK(relcl_model_config_to_json(&cs[0], 0, &json));
  tu_check(strstr(json, "\"dropout\":0.1,") != NULL, "0.1f is written 0.1: %s", json);
  free(json);

  /* relcl-train's own writer before the library had one (spaces after ':' and ',') */
  const char *old =
      "{\"vocab\": 500, \"vocab-fnv1a64\": \"00000000deadbeef\", \"enc-layers\": 2, "
      "\"dec-layers\": 2, \"d-model\": 32, \"heads\": 4, \"d-ff\": 64, \"dropout\": 0.1, "
      "\"label-smoothing\": 0.1, \"positions\": \"relative\", \"max-relative-position\": 16, "
      "\"relative-per-head\": false, \"relative-keys-only\": false, \"pre-norm\": false, "
      "\"max-length\": 129}";
  relcl_model_config c;
  uint64_t h = 0;
  relcl_status st = relcl_model_config_from_json(old, &c, &h);
  tu_check(st == RELCL_OK && c.vocab == 500 && c.d_model == 32 && c.max_length == 129 &&
               c.positions == RELCL_POS_RELATIVE && h == 0xdeadbeefULL && c.dropout == 0.1f,
           "the JSON relcl-train wrote before is read: %s", relcl_last_error());

  /* each: a replacement of one part of `old`, and the key the message must name */
  static const struct {
    const char *from, *to, *key;
  } bad[] = {
      {"\"vocab\": 500", "\"vocab\": 500.7", "\"vocab\""},
      {"\"max-length\": 129", "\"max-length\": 2147483647", "\"max-length\""},
      {"\"max-length\": 129", "\"max-length\": 1e300", "\"max-length\""},
      {"\"heads\": 4", "\"heads\": \"4\"", "\"heads\""},
      {"\"heads\": 4", "\"heads\": -4", "\"heads\""},
      {"\"enc-layers\": 2", "\"enc-layers\": 32", "\"enc-layers\""},
      {"\"dropout\": 0.1", "\"dropout\": 1", "\"dropout\""},
      {"\"dropout\": 0.1", "\"dropout\": null", "\"dropout\""},
      {"\"positions\": \"relative\"", "\"positions\": \"sideways\"", "\"positions\""},
      {"\"pre-norm\": false", "\"pre-norm\": 0", "\"pre-norm\""},
      {"\"00000000deadbeef\"", "\"00000000DEADBEEF\"", "\"vocab-fnv1a64\""},
      {"\"00000000deadbeef\"", "\"deadbeef\"", "\"vocab-fnv1a64\""},
      {"\"d-ff\": 64", "\"d-ff\": 64, \"colour\": 1", "\"colour\""},
      {"\"d-ff\": 64", "\"d-ff\": 64, \"d-ff\": 64", "\"d-ff\" is given twice"},
      {"\"d-ff\": 64, ", "", "\"d-ff\" is missing"},
      {"\"max-length\": 129}", "\"max-length\": 129} x", "not a JSON object"},
      {"\"vocab\": 500", "\"vocab\\u0000x\": 500", "NUL"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char buf[1024];
    const char *at = strstr(old, bad[i].from);
    if (at == NULL) {
      tu_check(0, "test table: '%s' not in the JSON", bad[i].from);
      continue;
    }
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - old), old, bad[i].to,
             at + strlen(bad[i].from));
    st = relcl_model_config_from_json(buf, &c, &h);
    tu_check(st == RELCL_ERR_FORMAT && msg_has(bad[i].key), "refused: %s -> %s",
             bad[i].to[0] ? bad[i].to : "(removed)", relcl_last_error());
  }

  relcl_model_config big = cs[0];
  big.max_length = RELCL_MODEL_MAX_LENGTH + 1;
  json = NULL;
  st = relcl_model_config_to_json(&big, 0, &json);
  tu_check(st == RELCL_ERR_INVALID_ARG && json == NULL && msg_has("\"max-length\""),
           "a configuration that could not be read back is not written: %s", relcl_last_error());

  relcl_model_config a = small_config(), b = small_config();
  char why[128];
  b.dropout = 0.5f;
  b.max_length = 99;
  int same = relcl_model_config_compatible(&a, &b, why, sizeof why);
  b.d_model = 32;
  int differ = relcl_model_config_compatible(&a, &b, why, sizeof why);
  tu_check(same == 1 && differ == 0 && strcmp(why, "d-model 16, not 32") == 0,
           "compatible: dropout and max-length do not count, d-model does (%s)", why);
}

/* ---- 2. save and load ---- */

static float *arena(relcl_model *m, relcl_arena which) {
  float *x = tu_alloc_host(relcl_model_param_count(m));
  TU_OK(relcl_model_arena_read(m, which, x));
  return x;
}

static int same_arena(relcl_model *a, relcl_model *b, relcl_arena which) {
  size_t n = relcl_model_param_count(a);
  if (n != relcl_model_param_count(b)) return 0;
  float *x = arena(a, which), *y = arena(b, which);
  /* padding between tensors is not saved: compare the tensors only, as bytes */
  int ok = 1;
  for (size_t i = 0; ok && i < relcl_model_tensor_count(a); i++) {
    relcl_tensor_info t = relcl_model_tensor(a, i);
    ok = memcmp(x + t.offset, y + t.offset, t.size * sizeof *x) == 0;
  }
  free(x);
  free(y);
  return ok;
}

/* A model whose three arenas hold distinct random values (moments: v >= 0 as Adam has). */
static relcl_model *random_model(relcl_context *ctx, const relcl_model_config *c, uint64_t seed) {
  relcl_model *m = NULL;
  TU_OK(relcl_model_create(ctx, c, seed, &m));
  size_t n = relcl_model_param_count(m);
  float *x = tu_alloc_host(n);
  tu_fill(x, n, seed + 1);
  TU_OK(relcl_model_arena_write(m, RELCL_ARENA_ADAM_M, x));
  for (size_t i = 0; i < n; i++) x[i] = x[i] * x[i] * 1e-3f;
  TU_OK(relcl_model_arena_write(m, RELCL_ARENA_ADAM_V, x));
  free(x);
  return m;
}

/* Write value into element `at` of tensor `name` in the given arena. */
static void poke(relcl_model *m, relcl_arena which, const char *name, size_t at, float value) {
  float *x = arena(m, which);
  for (size_t i = 0; i < relcl_model_tensor_count(m); i++) {
    relcl_tensor_info t = relcl_model_tensor(m, i);
    if (strcmp(t.name, name) == 0) x[t.offset + at] = value;
  }
  TU_OK(relcl_model_arena_write(m, which, x));
  free(x);
}

static void test_save_load(relcl_context *ctx) {
  relcl_model_config c = small_config();
  relcl_model *m = random_model(ctx, &c, 7), *back = NULL, *back2 = NULL;
  char path[128], path2[128];
  snprintf(path, sizeof path, "%s/full.safetensors", dir);
  snprintf(path2, sizeof path2, "%s/params.safetensors", dir);
  relcl_checkpoint_meta extra[] = {{"relcl.step", "41"}, {"note", "a test"}};
  relcl_model_save_opts so = {RELCL_MODEL_OPTIMIZER, 41, 0xabcdef0123456789ULL, extra, 2};
  TU_OK(relcl_model_save(m, path, &so));
  so.flags = 0;
  so.n_meta = 0;
  TU_OK(relcl_model_save(m, path2, &so));

  uint64_t hash = 0, step = 0;
  relcl_status st = relcl_model_load(ctx, path, 0, &back, &hash);
  tu_check(st == RELCL_OK && memcmp(relcl_model_get_config(back), &c, sizeof c) == 0 &&
               hash == 0xabcdef0123456789ULL,
           "load: the configuration and vocabulary hash come back: %s", relcl_last_error());
  tu_check(st == RELCL_OK && same_arena(m, back, RELCL_ARENA_PARAMS),
           "load: parameters bit for bit");

  relcl_checkpoint *ck = NULL;
  TU_OK(relcl_checkpoint_open(path, 0, &ck));
  TU_OK(relcl_model_create(ctx, &c, 99, &back2));
  st = relcl_model_restore(back2, ck, RELCL_MODEL_OPTIMIZER, &step);
  tu_check(st == RELCL_OK && step == 41 && same_arena(m, back2, RELCL_ARENA_PARAMS) &&
               same_arena(m, back2, RELCL_ARENA_ADAM_M) && same_arena(m, back2, RELCL_ARENA_ADAM_V),
           "restore with the optimizer: parameters, both moments and the step bit for bit (%s)",
           relcl_last_error());
  const char *note = relcl_checkpoint_meta_get(ck, "note");
  tu_check(note && strcmp(note, "a test") == 0 &&
               relcl_checkpoint_meta_get(ck, "relcl.step") != NULL &&
               relcl_checkpoint_tensor_count(ck) == 3 * relcl_model_tensor_count(m),
           "the file holds the extra metadata and 3 tensors per parameter");
  relcl_checkpoint_close(ck);

  TU_OK(relcl_checkpoint_open(path2, 0, &ck));
  st = relcl_model_restore(back2, ck, RELCL_MODEL_OPTIMIZER, &step);
  tu_check(st == RELCL_ERR_FORMAT && msg_has(RELCL_MODEL_ADAM_STEP_KEY),
           "a file without the optimizer state cannot restore it: %s", relcl_last_error());
  tu_check(relcl_checkpoint_tensor_count(ck) == relcl_model_tensor_count(m),
           "saved without the optimizer: parameters only");
  relcl_checkpoint_close(ck);

  /* another architecture: refused naming a tensor and its shapes */
  relcl_model_config o = c;
  o.d_ff = 32;
  relcl_model *other = NULL;
  TU_OK(relcl_model_create(ctx, &o, 1, &other));
  TU_OK(relcl_checkpoint_open(path, 0, &ck));
  st = relcl_model_restore(other, ck, 0, NULL);
  tu_check(st == RELCL_ERR_FORMAT && msg_has("ffn") && msg_has("shape"),
           "a model of another d-ff is refused naming the tensor: %s", relcl_last_error());
  relcl_checkpoint_close(ck);
  relcl_model_destroy(other);
  /* fewer layers: every tensor it has is in the file, but the file has more */
  o = c;
  o.enc_layers = 1;
  TU_OK(relcl_model_create(ctx, &o, 1, &other));
  TU_OK(relcl_checkpoint_open(path, 0, &ck));
  st = relcl_model_restore(other, ck, 0, NULL);
  tu_check(st == RELCL_ERR_FORMAT && msg_has("enc.1.") && msg_has("not part of this model"),
           "a model of fewer layers is refused naming an extra tensor: %s", relcl_last_error());
  relcl_checkpoint_close(ck);
  relcl_model_destroy(other);

  st = relcl_model_save(m, path, &(relcl_model_save_opts){0, 0, 0, (relcl_checkpoint_meta[]){
                                                             {RELCL_CHECKPOINT_CONFIG_KEY, "{}"}},
                                                          1});
  tu_check(st == RELCL_ERR_INVALID_ARG, "save refuses a caller's relcl.config: %s",
           relcl_last_error());
  relcl_model_destroy(back);
  relcl_model_destroy(back2);
  relcl_model_destroy(m);
}

/* ---- 3. bad checkpoints ---- */

static void test_nonfinite(relcl_context *ctx) {
  relcl_model_config c = small_config();
  static const struct {
    relcl_arena arena;
    const char *tensor, *file_name;
    float value;
  } cases[] = {
      {RELCL_ARENA_PARAMS, "enc.1.ffn.w1.weight", "enc.1.ffn.w1.weight", NAN},
      {RELCL_ARENA_PARAMS, "emb.weight", "emb.weight", INFINITY},
      {RELCL_ARENA_ADAM_V, "dec.0.self_attn.wo.bias", "adam_v/dec.0.self_attn.wo.bias", -INFINITY},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    relcl_model *m = random_model(ctx, &c, 11 + k), *fresh = NULL, *got = NULL;
    char path[128];
    snprintf(path, sizeof path, "%s/bad%zu.safetensors", dir, k);
    poke(m, cases[k].arena, cases[k].tensor, 3, cases[k].value);
    relcl_model_save_opts so = {RELCL_MODEL_OPTIMIZER, 5, 0, NULL, 0};
    TU_OK(relcl_model_save(m, path, &so));
    relcl_status st = relcl_model_load(ctx, path, RELCL_MODEL_OPTIMIZER, &got, NULL);
    tu_check(st == RELCL_ERR_FORMAT && got == NULL && msg_has(cases[k].file_name) &&
                 msg_has(isnan(cases[k].value) ? "NaN" : "infinity"),
             "%s in %s refused naming the tensor: %s",
             isnan(cases[k].value) ? "NaN" : "infinity", cases[k].file_name, relcl_last_error());
    /* a refused restore leaves the model as it was */
    relcl_checkpoint *ck = NULL;
    TU_OK(relcl_checkpoint_open(path, 0, &ck));
    TU_OK(relcl_model_create(ctx, &c, 3, &fresh));
    float *before = arena(fresh, RELCL_ARENA_PARAMS);
    st = relcl_model_restore(fresh, ck, RELCL_MODEL_OPTIMIZER, NULL);
    float *after = arena(fresh, RELCL_ARENA_PARAMS);
    tu_check(st == RELCL_ERR_FORMAT &&
                 memcmp(before, after, relcl_model_param_count(fresh) * sizeof *before) == 0,
             "a refused restore leaves the parameters as they were");
    free(before);
    free(after);
    relcl_checkpoint_close(ck);
    relcl_model_destroy(fresh);
    relcl_model_destroy(m);
  }
}

/* A checkpoint with the tensors of a good model and the given relcl.config text. */
static void write_with_config(relcl_context *ctx, const char *path, const char *json) {
  relcl_model_config c = small_config();
  relcl_model *m = NULL;
  TU_OK(relcl_model_create(ctx, &c, 1, &m));
  size_t nt = relcl_model_tensor_count(m);
  float *p = arena(m, RELCL_ARENA_PARAMS);
  relcl_checkpoint_tensor *t = calloc(nt, sizeof *t);
  for (size_t i = 0; i < nt; i++) {
    relcl_tensor_info info = relcl_model_tensor(m, i);
    t[i].name = info.name;
    t[i].ndim = info.ndim;
    for (int d = 0; d < info.ndim; d++) t[i].shape[d] = info.shape[d];
    t[i].data = p + info.offset;
  }
  relcl_checkpoint_meta md = {RELCL_CHECKPOINT_CONFIG_KEY, json};
  TU_OK(relcl_checkpoint_save(path, t, nt, &md, 1));
  free(t);
  free(p);
  relcl_model_destroy(m);
}

static void test_bad_config(relcl_context *ctx) {
  relcl_model_config c = small_config();
  char *json = NULL;
  TU_OK(relcl_model_config_to_json(&c, 42, &json));
  static const struct {
    const char *from, *to, *key;
  } cases[] = {
      {"\"vocab\":23", "\"vocab\":23.7", "\"vocab\""},
      /* 2^31 - 1 positions: relcl-translate's batch of 64 such sources would be 512 GiB */
      {"\"max-length\":33", "\"max-length\":2147483647", "\"max-length\""},
      {"\"max-length\":33", "\"max-length\":33, \"d_model\":16", "\"d_model\""},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char buf[1024], path[128];
    const char *at = strstr(json, cases[k].from);
    if (!tu_check(at != NULL, "test table: %s in %s", cases[k].from, json)) continue;
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - json), json, cases[k].to,
             at + strlen(cases[k].from));
    snprintf(path, sizeof path, "%s/config%zu.safetensors", dir, k);
    write_with_config(ctx, path, buf);
    relcl_model *m = NULL;
    relcl_status st = relcl_model_load(ctx, path, 0, &m, NULL);
    tu_check(st == RELCL_ERR_FORMAT && m == NULL && msg_has(path) && msg_has(cases[k].key),
             "checkpoint with %s refused naming the key: %s", cases[k].to, relcl_last_error());
    relcl_model_destroy(m);
  }
  /* the control: the unmodified JSON loads */
  char path[128];
  snprintf(path, sizeof path, "%s/config-good.safetensors", dir);
  write_with_config(ctx, path, json);
  relcl_model *m = NULL;
  relcl_status st = relcl_model_load(ctx, path, 0, &m, NULL);
  tu_check(st == RELCL_OK, "the same checkpoint with the unmodified JSON loads: %s",
           relcl_last_error());
  relcl_model_destroy(m);
  free(json);
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/relcl-model-io-XXXXXX");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  test_json();
  relcl_context *ctx = tu_context();
  test_save_load(ctx);
  test_nonfinite(ctx);
  test_bad_config(ctx);
  relcl_context_destroy(ctx);
  remove_dir();
  return tu_finish();
}
