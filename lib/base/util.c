/* Small host utilities shared by the files of librelcl: the FNV-1a hash, UTF-8 validation,
 * writing a file atomically and reading one whole, within a size limit. */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t relcl__fnv1a64(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

size_t relcl__utf8_bad(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t k;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      k = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      k = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      k = 3;
      cp = c & 0x07;
    } else {
      return i; /* continuation byte, C0/C1 (overlong) or F5..FF */
    }
    if (n - i <= k) return i;
    for (size_t j = 1; j <= k; j++) {
      unsigned b = s[i + j];
      if ((b & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return i;
    if (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) return i;
    i += k + 1;
  }
  return n;
}

struct relcl__file_out {
  int fd;
  size_t written;
  int err; /* errno of the first failure */
};

bool relcl__file_out_write(relcl__file_out *out, const void *data, size_t n) {
  const unsigned char *p = data;
  while (n > 0 && out->err == 0) {
    ssize_t k = write(out->fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      out->err = k < 0 ? errno : EIO;
      break;
    }
    p += k;
    n -= (size_t)k;
    out->written += (size_t)k;
  }
  return out->err == 0;
}

size_t relcl__file_out_written(const relcl__file_out *out) { return out->written; }

/* The directory part of path ("." when none). */
static void dir_of(const char *path, char *dir, size_t size) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) {
    snprintf(dir, size, ".");
    return;
  }
  size_t n = (size_t)(slash - path);
  snprintf(dir, size, "%.*s", (int)(n ? n : 1), path); /* "/x" lives in "/" */
}

relcl_status relcl__write_atomic(const char *path, relcl__file_writer fn, void *arg) {
  char dir[4096], tmp[4096 + 300];
  dir_of(path, dir, sizeof dir);
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.tmp-XXXXXX", dir, base) >= sizeof tmp)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: path too long", path);
  relcl__file_out out = {mkstemp(tmp), 0, 0};
  if (out.fd < 0)
    return relcl__fail(RELCL_ERR_IO, "%s: cannot create a temporary file in %s: %s", path, dir,
                       strerror(errno));
  const char *what = "write";
  if (fchmod(out.fd, 0644) != 0) { /* mkstemp made it 0600 */
    what = "chmod";
    out.err = errno;
  }
  relcl_status st = out.err == 0 ? fn(&out, arg) : RELCL_ERR_IO;
  if (st == RELCL_OK && out.err != 0) st = RELCL_ERR_IO;
  if (st == RELCL_OK && fsync(out.fd) != 0) {
    what = "fsync";
    out.err = errno;
    st = RELCL_ERR_IO;
  }
  if (close(out.fd) != 0 && st == RELCL_OK) {
    what = "close";
    out.err = errno;
    st = RELCL_ERR_IO;
  }
  if (st == RELCL_OK && rename(tmp, path) != 0) {
    what = "rename";
    out.err = errno;
    st = RELCL_ERR_IO;
  }
  if (st != RELCL_OK) {
    unlink(tmp);
    if (out.err != 0) /* else fn failed and said why */
      relcl__fail(RELCL_ERR_IO, "%s: %s of the temporary file failed: %s", path, what,
                  strerror(out.err));
    return st;
  }
  /* The new file is in place; without this its directory entry may not survive a crash. */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  bool synced = dfd >= 0 && (fsync(dfd) == 0 || errno == EINVAL); /* EINVAL: fs cannot */
  if (dfd >= 0) close(dfd);
  if (!synced)
    return relcl__fail(RELCL_ERR_IO, "%s: saved, but fsync of directory %s failed: %s", path,
                       dir, strerror(errno));
  return RELCL_OK;
}

relcl_status relcl__read_file(const char *path, size_t max, const char *what, char **out,
                              size_t *size) {
  *out = NULL;
  *size = 0;
  int fd = open(path, O_RDONLY);
  if (fd < 0) return relcl__fail(RELCL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  relcl_status st = RELCL_OK;
  struct stat sb;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    st = relcl__fail(RELCL_ERR_IO, "%s: is a directory, not a %s", path, what);
    goto done;
  }
  /* a regular file's size is known; anything else (a pipe, /dev/zero) is read up to max + 1 */
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max) goto too_big;
  for (;;) {
    if (n == cap) {
      size_t grow = cap ? 2 * cap : 1 << 16;
      if (grow > max + 1) grow = max + 1;
      char *p = realloc(buf, grow + 1);
      if (p == NULL) {
        st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of memory reading it", path);
        goto done;
      }
      buf = p;
      cap = grow;
    }
    ssize_t k = read(fd, buf + n, cap - n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      st = relcl__fail(RELCL_ERR_IO, "%s: read failed: %s", path, strerror(errno));
      goto done;
    }
    if (k == 0) break;
    n += (size_t)k;
    if (n > max) goto too_big;
  }
  buf[n] = '\0';
  *out = buf;
  *size = n;
  buf = NULL;
  goto done;
too_big:
  st = relcl__fail(RELCL_ERR_FORMAT, "%s: larger than %zu bytes, too large for a %s", path, max,
                   what);
done:
  free(buf);
  close(fd);
  return st;
}
