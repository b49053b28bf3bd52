/*
 * cli.h — strict parsing of command-line values, the one parser that
 * flashcl-bench and flashcl-info share: a number is decimal digits and
 * nothing else (no sign, no space, no suffix, no exponent), within its
 * range; a list is such numbers separated by single commas. Each parser
 * leaves its output untouched on failure and says why in `why`. And the
 * tools' one clock.
 */
#ifndef FLASHCL_CLI_H
#define FLASHCL_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"

/** The host's monotonic clock, in ms: what the tools time calls by. */
double fclu_now_ms(void);

/** The longest reason a parser writes, with its NUL. */
#define FCLU_WHY_LEN 256

/** A decimal integer in [min, max]. @return 0, or -1 with why set. */
int fclu_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out, char *why,
                   size_t why_len);

/** Splits `text` in place at its commas into at most max_n fields (*n of
 *  them), none empty: "a,,b", ",a" and "a," are refused, as is "".
 *  @return 0, or -1 with why set. */
int fclu_split_list(char *text, char **fields, size_t max_n, size_t *n, char *why,
                    size_t why_len);

/** A comma-separated list (fclu_split_list) of from min_n to max_n integers, each in
 *  [0, max]; *n receives the count. @return 0, or -1 with why set. */
int fclu_parse_u64_list(const char *text, uint64_t max, size_t min_n, size_t max_n,
                        uint64_t *out, size_t *n, char *why, size_t why_len);

/** "f32", "f16" or "bf16". @return 0, or -1 with why set. */
int fclu_parse_dtype(const char *text, fcl_dtype *out, char *why, size_t why_len);

/** A flash kernel family by its fcl_flash_kernel_name ("auto", "simt",
 *  "mma", ...). @return 0, or -1 with why set (naming them all). */
int fclu_parse_kernel(const char *text, unsigned *out, char *why, size_t why_len);

#endif
