/*
 * file.c — the one way the library opens a file by name: without blocking
 * (a FIFO with no writer, a terminal), then only a regular file of bounded
 * size, judged by fstat on the descriptor that is read, so that what is
 * checked is what is read (docs/design.md, "Files the library opens").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

/* Opens `path` with `flags` plus O_NONBLOCK and O_CLOEXEC; -1 with *why
 * unless it is a regular file of at most `max` bytes (0: any size). The
 * descriptor is made blocking again: a regular file's reads never wait. */
static int open_regular(const char *path, int flags, size_t max, size_t *bytes, char *why,
                        size_t why_len) {
  const int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    /* ENXIO: a FIFO opened to write with no reader (where a blocking open
     * would wait for one) */
    if (e == ENXIO)
      snprintf(why, why_len, "%s is skipped: a FIFO or device with nothing at the other end, "
               "not a regular file", path);
    else
      snprintf(why, why_len, "cannot open %s: %s", path, strerror(e));
    errno = e;
    return -1;
  }
  struct stat st;
  const char *bad = NULL;
  char size[96];
  if (fstat(fd, &st) != 0)
    bad = strerror(errno);
  else if (S_ISDIR(st.st_mode))
    bad = "a folder, not a regular file";
  else if (!S_ISREG(st.st_mode))
    bad = S_ISFIFO(st.st_mode)   ? "a FIFO, not a regular file"
          : S_ISSOCK(st.st_mode) ? "a socket, not a regular file"
                                 : "a device, not a regular file";
  else if (max && (uintmax_t)st.st_size > (uintmax_t)max) {
    snprintf(size, sizeof size, "%jd bytes, more than the %zu allowed", (intmax_t)st.st_size,
             max);
    bad = size;
  }
  if (!bad && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) bad = strerror(errno);
  if (bad) {
    snprintf(why, why_len, "%s is skipped: %s", path, bad);
    close(fd);
    errno = EINVAL;
    return -1;
  }
  *bytes = (size_t)st.st_size;
  return fd;
}

char *fcl__read_file(const char *path, size_t max, char *why, size_t why_len) {
  size_t bytes = 0;
  const int fd = open_regular(path, O_RDONLY, max, &bytes, why, why_len);
  if (fd < 0) return NULL;
  /* A file that grows while it is read is read to the size fstat saw. */
  char *text = malloc(bytes + 1);
  size_t n = 0;
  int failed = !text;
  while (!failed && n < bytes) {
    const ssize_t got = read(fd, text + n, bytes - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) failed = 1;
    if (got <= 0) break;
    n += (size_t)got;
  }
  const int e = text ? errno : ENOMEM;
  close(fd);
  if (failed) {
    snprintf(why, why_len, "cannot read %s: %s", path, strerror(e));
    free(text);
    errno = e;
    return NULL;
  }
  text[n] = '\0';
  return text;
}

FILE *fcl__append_file(const char *path, char *why, size_t why_len) {
  size_t bytes;
  const int fd = open_regular(path, O_WRONLY | O_APPEND | O_CREAT, 0, &bytes, why, why_len);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "a");
  if (!f) {
    snprintf(why, why_len, "cannot open %s: %s", path, strerror(errno));
    close(fd);
  }
  return f;
}
