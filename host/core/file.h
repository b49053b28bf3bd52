/*
 * file.h — the one door to the files the library reads (file.c).
 */
#ifndef FCL_FILE_H
#define FCL_FILE_H

#include "common.h"

/** A whole file of at most `max` bytes, NUL-terminated (free() it). NULL
 *  with `why` and errno set (ENOENT: there is none) where it cannot be
 *  opened or read, or is not a regular file (a FIFO, a device, a socket, a
 *  folder: never waited on) or is larger: every file the library reads. */
char *fcl__read_file(const char *path, size_t max, char *why, size_t why_len);
/** `path` opened to append, created where absent; NULL with `why` where it
 *  cannot be, or is not a regular file (never waits on a FIFO). */
FILE *fcl__append_file(const char *path, char *why, size_t why_len);

#endif
