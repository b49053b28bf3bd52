/*
 * ptx.h — turning NVIDIA's sm_90 PTX of a kernel with marked Hopper
 * instructions into sm_90a PTX (ptx.c): text in, text out, no OpenCL.
 */
#ifndef FCL_PTX_H
#define FCL_PTX_H

#include <stddef.h>

/** What starts a marked instruction: a kernel writes each sm_90a-only
 *  instruction as the inline-asm string FCL_PTX_MARK "wgmma...;", which
 *  NVIDIA's compiler (targeting sm_90) keeps as a PTX comment with its
 *  operands substituted; fcl__ptx_unmark removes the marker. The kernels
 *  spell it in cl/wgmma.cl (WG_MARK); tests/test_wgmma.c checks
 *  that the two agree. */
#define FCL_PTX_MARK "//@@ "

/** The sm_90a PTX of `ptx` (`len` bytes; trailing NULs allowed): each
 *  line whose first non-blank text is FCL_PTX_MARK loses the marker, and
 *  the one `.target sm_90` line becomes `.target sm_90a` (its other
 *  targets, e.g. texmode_independent, kept). Refused, with the reason in
 *  why[why_len], when the text is not PTX of that form: a NUL inside it,
 *  no `.version` of 8.0 or later (wgmma's), no or several `.target`
 *  lines, a target other than sm_90, no marker, or a marker anywhere but
 *  at the start of a line's text.
 *  @return 0 and *out (malloc'd, NUL-terminated, for free()) with
 *  *out_len its length without the NUL; -1 refused, -2 out of memory
 *  (*out NULL in both). */
int fcl__ptx_unmark(const char *ptx, size_t len, char **out, size_t *out_len, char *why,
                    size_t why_len);

#endif
