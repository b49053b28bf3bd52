/*
 * args.c — what every attention kernel is handed: the parameter block of
 * cl/params.h, filled from the call's descriptor, and the buffer list of
 * FCL_ATTENTION_BUFFERS, set by position from the one macro both sides
 * expand. The kernel's own count of arguments is checked against it
 * (fcl__set_args), so a kernel and the host cannot drift apart silently.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

_Static_assert(sizeof(fcl_params) % 8 == 0, "fcl_params must end on an 8-byte boundary");

/* The packed layout [batch][seqlen][heads][head_dim]. */
static fcl_view packed_view(size_t seqlen, size_t heads, size_t head_dim) {
  return (fcl_view){.offset = 0,
                    .batch = (cl_ulong)seqlen * heads * head_dim,
                    .seq = (cl_ulong)heads * head_dim,
                    .head = head_dim};
}

fcl_params fcl__params_of(const fcl_attention_desc *desc) {
  fcl_params p;
  memset(&p, 0, sizeof p);
  const size_t d = desc->head_dim;
  p.q = p.o = p.dout = p.dq = packed_view(desc->seqlen_q, desc->heads_q, d);
  p.k = p.v = p.dk = p.dv = packed_view(desc->seqlen_k, desc->heads_kv, d);
  p.lse_batch = (cl_ulong)desc->heads_q * desc->seqlen_q;
  p.lse_head = desc->seqlen_q;
  /* fcl__check_desc bounds every size by INT_MAX, and the token counts
   * by the tensors' sizes; the launches check their own products. */
  p.batch = (cl_int)desc->batch;
  p.heads_q = (cl_int)desc->heads_q;
  p.heads_kv = (cl_int)desc->heads_kv;
  p.head_dim = (cl_int)d;
  p.seqlen_q = (cl_int)desc->seqlen_q;
  p.seqlen_k = (cl_int)desc->seqlen_k;
  p.tokens_q = (cl_ulong)desc->batch * desc->seqlen_q;
  p.tokens_k = (cl_ulong)desc->batch * desc->seqlen_k;
  p.window_left = -1;
  p.window_right = desc->causal ? 0 : -1;
  p.vec4 = d % 4 == 0;
  p.scale = desc->scale;
  /* FCL_MAX_SCALE keeps scale log2(e) a finite float */
  p.exp_factor = (cl_float)((double)desc->scale * M_LOG2E);
  p.lse_factor = desc->scale;
  return p;
}

fcl_status fcl__set_attention_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                                   const fcl__attention_buffers *bufs, const fcl_params *params,
                                   cl_mem io_counter) {
#define FCL_BUFFER_ARG(buffer, type) FCL_ARG(bufs->buffer),
  const fcl__arg args[] = {FCL_ATTENTION_BUFFERS(FCL_BUFFER_ARG) FCL_ARG(*params),
                           FCL_ARG(io_counter)};
#undef FCL_BUFFER_ARG
  const cl_uint n = sizeof args / sizeof args[0] - (io_counter ? 0 : 1);
  return fcl__set_args(ctx, kernel, name, args, n);
}
