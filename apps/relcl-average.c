/* relcl-average: the element-wise mean of checkpoints made with one configuration, as Vaswani
 * et al. (2017) averaged the last 5 (base) or 20 (big) checkpoints before decoding. The
 * arithmetic is relcl_checkpoint_average; this checks the configurations first (to say which
 * field differs) and puts the SentencePiece model beside the output, so that
 * `relcl-translate --model OUT` works. */
#include "relcl.h"
#include "relcl_checkpoint.h"
#include "relcl_model.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PROG "relcl-average"

static void usage(FILE *out) {
  fprintf(out,
          "usage: " PROG " --output OUT.safetensors CK1 CK2 ...\n"
          "       " PROG " --model-dir DIR --last N [--output OUT.safetensors]\n"
          "Averages the parameters of checkpoints made with the same configuration and\n"
          "vocabulary (the metadata of the last one is kept, plus relcl.average_of and\n"
          "relcl.averaged_from; relcl-train --resume refuses such a checkpoint).\n\n"
          "  --output FILE     the averaged checkpoint, neither an input nor a ckpt-* name\n"
          "                    (with --model-dir: default\n"
          "                    DIR/average.safetensors; translate it with\n"
          "                    relcl-translate --model DIR --checkpoint average.safetensors)\n"
          "  --model-dir DIR   a relcl-train model directory ...\n"
          "  --last N          ... and its N newest checkpoints\n"
          "  --help            this text\n"
          "The SentencePiece model the checkpoints name is copied beside the output when it\n"
          "is not there. Exit status: 0, 1 for an error (one line), 2 for a usage error.\n");
}

static int usage_error(const char *fmt, const char *a) {
  fprintf(stderr, PROG ": ");
  fprintf(stderr, fmt, a);
  fprintf(stderr, " (try --help)\n");
  return 2;
}

static void dir_of(const char *path, char *buf, size_t size) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) snprintf(buf, size, ".");
  else if (slash == path) snprintf(buf, size, "/");
  else snprintf(buf, size, "%.*s", (int)(slash - path), path);
}

static char *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  char *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 1 << 16;
      char *p = realloc(buf, cap);
      if (p == NULL) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = p;
    }
    size_t k = fread(buf + n, 1, cap - n, f);
    n += k;
    if (k == 0) break;
  }
  bool bad = ferror(f) != 0;
  fclose(f);
  if (bad) {
    free(buf);
    return NULL;
  }
  *size = n;
  return buf;
}

/* Returns 0, or 2 after a message when output is one of the inputs (the same file under any
 * name: ./x, a hard or symbolic link) or a ckpt-* name: relcl-train --resume and --keep take
 * every ckpt-* file for one of their own checkpoints. */
static int check_output(const char *output, const char *const *inputs, size_t n) {
  const char *slash = strrchr(output, '/'), *base = slash ? slash + 1 : output;
  if (strncmp(base, "ckpt-", 5) == 0) {
    fprintf(stderr, PROG ": --output %s: ckpt-* names are relcl-train's own checkpoints; "
            "choose another name (e.g. average.safetensors) (try --help)\n", output);
    return 2;
  }
  struct stat out, in;
  if (stat(output, &out) != 0) return 0; /* a new file */
  for (size_t i = 0; i < n; i++)
    if (stat(inputs[i], &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
      fprintf(stderr, PROG ": --output %s is the input %s: averaging would replace one of "
              "its own checkpoints (try --help)\n", output, inputs[i]);
      return 2;
    }
  return 0;
}

/* Copy the vocabulary file from src_dir to dst_dir unless the same bytes are there already.
 * Returns 0, or 1 after a message. */
static int copy_vocab(const char *name, const char *src_dir, const char *dst_dir) {
  char src[PATH_MAX + 256], dst[PATH_MAX + 256], tmp[PATH_MAX + 300];
  snprintf(src, sizeof src, "%s/%s", src_dir, name);
  snprintf(dst, sizeof dst, "%s/%s", dst_dir, name);
  size_t ns = 0, nd = 0;
  char *a = read_all(src, &ns);
  if (a == NULL) {
    fprintf(stderr, PROG ": the checkpoints' SentencePiece model %s: %s\n", src,
            errno ? strerror(errno) : "cannot read");
    return 1;
  }
  char *b = read_all(dst, &nd);
  int rc = 0;
  if (b != NULL) {
    if (nd != ns || memcmp(a, b, ns) != 0) {
      fprintf(stderr, PROG ": %s exists and is not the checkpoints' vocabulary %s\n", dst, src);
      rc = 1;
    }
  } else {
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp-average", dst_dir, name);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL || fwrite(a, 1, ns, f) != ns || fflush(f) != 0) {
      fprintf(stderr, PROG ": %s: %s\n", tmp, strerror(errno));
      rc = 1;
    }
    if (f != NULL && fclose(f) != 0 && rc == 0) {
      fprintf(stderr, PROG ": %s: %s\n", tmp, strerror(errno));
      rc = 1;
    }
    if (rc == 0 && rename(tmp, dst) != 0) {
      fprintf(stderr, PROG ": %s: %s\n", dst, strerror(errno));
      rc = 1;
    }
    if (rc) remove(tmp);
    else fprintf(stderr, PROG ": copied %s beside the output\n", src);
  }
  free(a);
  free(b);
  return rc;
}

int main(int argc, char **argv) {
  static const struct option long_opts[] = {
      {"output", required_argument, NULL, 'o'},
      {"model-dir", required_argument, NULL, 'm'},
      {"last", required_argument, NULL, 'l'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *output = NULL, *model_dir = NULL;
  int last = 0, c;
  opterr = 0; /* our own one-line messages */
  while ((c = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    /* getopt_long has just stepped past the option it returns */
    if (c == '?') return usage_error("unknown option '%s'", argv[optind - 1]);
    if (c == ':') return usage_error("%s needs a value", argv[optind - 1]);
    if (c == 'h') {
      usage(stdout);
      return 0;
    }
    if (c == 'o') output = optarg;
    else if (c == 'm') model_dir = optarg;
    else {
      char *end;
      long n = strtol(optarg, &end, 10);
      if (*optarg == '\0' || *end || n < 1 || n > 100000)
        return usage_error("--last: invalid value '%s'", optarg);
      last = (int)n;
    }
  }
  /* what is left are the checkpoints (getopt_long moved them behind the options) */
  const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
  size_t n_in = 0;
  if (inputs == NULL) return 1;
  for (int i = optind; i < argc; i++) inputs[n_in++] = argv[i];
  int rc = 2;
  relcl_checkpoint_list list;
  memset(&list, 0, sizeof list);
  char out_buf[PATH_MAX + 64];
  if (model_dir != NULL) {
    if (n_in > 0 || last < 1) {
      rc = usage_error("%s", "--model-dir takes --last N and no checkpoint arguments");
      goto done;
    }
    rc = 1;
    if (relcl_checkpoint_list_dir(model_dir, &list) != RELCL_OK) {
      fprintf(stderr, PROG ": %s\n", relcl_last_error());
      goto done;
    }
    if (list.count < (size_t)last) {
      fprintf(stderr, PROG ": %s has %zu checkpoint%s, --last %d asks for more\n", model_dir,
              list.count, list.count == 1 ? "" : "s", last);
      goto done;
    }
    for (size_t i = list.count - (size_t)last; i < list.count; i++)
      inputs[n_in++] = list.paths[i];
    if (output == NULL) {
      snprintf(out_buf, sizeof out_buf, "%s/average.safetensors", model_dir);
      output = out_buf;
    }
  } else if (last > 0) {
    rc = usage_error("%s", "--last needs --model-dir");
    goto done;
  }
  if (output == NULL || n_in == 0) {
    rc = usage_error("%s", "--output and at least one checkpoint are required");
    goto done;
  }
  if ((rc = check_output(output, inputs, n_in)) != 0) goto done;
  rc = 1;
  /* the configurations first, one file at a time: the first difference, named */
  relcl_model_config first_cfg, cfg;
  uint64_t first_hash = 0, hash = 0;
  char spm_name[256] = "spm.model", first_dir[PATH_MAX], why[256];
  for (size_t i = 0; i < n_in; i++) {
    relcl_checkpoint *ck = NULL;
    if (relcl_checkpoint_open(inputs[i], 0, &ck) != RELCL_OK ||
        relcl_model_checkpoint_config(ck, &cfg, &hash) != RELCL_OK) {
      fprintf(stderr, PROG ": %s\n", relcl_last_error());
      relcl_checkpoint_close(ck);
      goto done;
    }
    bool differs = false;
    if (i == 0) {
      first_cfg = cfg;
      first_hash = hash;
      const char *sp = relcl_checkpoint_meta_get(ck, "relcl.spm_model");
      if (sp) snprintf(spm_name, sizeof spm_name, "%s", sp);
      dir_of(inputs[i], first_dir, sizeof first_dir);
    } else if (hash != first_hash) {
      snprintf(why, sizeof why, "another vocabulary (SentencePiece hash %016" PRIx64
               ", not %016" PRIx64 ")", hash, first_hash);
      differs = true;
    } else if (!relcl_model_config_compatible(&cfg, &first_cfg, why + 2, sizeof why - 2)) {
      memcpy(why, "--", 2); /* the keys are relcl-train's flags */
      differs = true;
    } else if (memcmp(&cfg, &first_cfg, sizeof cfg) != 0) {
      /* dropout, label smoothing or max-length: the library refuses to average those too */
      snprintf(why, sizeof why, "relcl.config differs");
      differs = true;
    }
    relcl_checkpoint_close(ck);
    if (differs) {
      fprintf(stderr, PROG ": %s was made with another configuration than %s: %s\n",
              inputs[i], inputs[0], why);
      goto done;
    }
  }
  if (relcl_checkpoint_average(inputs, n_in, output) != RELCL_OK) {
    fprintf(stderr, PROG ": %s\n", relcl_last_error());
    goto done;
  }
  printf("averaged %zu checkpoint%s into %s\n", n_in, n_in == 1 ? "" : "s", output);
  char out_dir[PATH_MAX];
  dir_of(output, out_dir, sizeof out_dir);
  struct stat a, b;
  bool same_dir = stat(out_dir, &a) == 0 && stat(first_dir, &b) == 0 && a.st_dev == b.st_dev &&
                  a.st_ino == b.st_ino;
  if (!same_dir && copy_vocab(spm_name, first_dir, out_dir)) goto done;
  rc = 0;
done:
  relcl_checkpoint_list_free(&list);
  free(inputs);
  return rc;
}
