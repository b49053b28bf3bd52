/*
 * test_args.c — what every attention kernel is handed (cl/params.h,
 * host/problem/args.c): the parameter block arrives field by field as the host
 * filled it, the buffers in their order, and the checks that guard both
 * after a build refuse a kernel that disagrees with the host: a count of
 * arguments other than CL_KERNEL_NUM_ARGS, a local memory size other than
 * the plan's.
 */
#include "harness.h"
#include "resources.h"
#include "args.h"
#include "program.h"

#include <stdio.h>
#include <string.h>

#define FIELDS (9 * 4 + 7 + 14 + 4 + 2 + 2 + 1)
#define BUFFERS 19

static cl_mem one_value(fcl_context *ctx, float value) {
  cl_mem mem = fclu_upload(ctx, &value, 1, FCL_DTYPE_F32);
  ck_assert_ptr_nonnull(mem);
  return mem;
}

/* A one-float buffer into *slot, and the word the probe reads back from it. */
static void float_arg(fcl_context *ctx, cl_mem *slot, float value, cl_ulong *want, int *n) {
  *slot = one_value(ctx, value);
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  want[(*n)++] = bits;
}

static cl_mem one_int(fcl_context *ctx, cl_int value) {
  cl_int err;
  cl_mem mem = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_COPY_HOST_PTR, sizeof value,
                              &value, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  return mem;
}

static cl_kernel probe_kernel(fcl_context *ctx) {
  fcl__options opts;
  fcl__options_init(&opts);
  fcl__options_define(&opts, "FCL_DTYPE", 0);
  cl_kernel kernel;
  ck_assert_int_eq(fcl__kernel(ctx, FCL_SRC_PARAMS_PROBE, &opts, "params_probe", &kernel),
                   FCL_SUCCESS);
  return kernel;
}

START_TEST(the_parameter_block_arrives_field_by_field) {
  fcl_context *ctx = th_context();
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 1);
  fcl_params p;
  memset(&p, 0, sizeof p);
  cl_ulong want[FIELDS + BUFFERS];
  int n = 0;
  fcl_view *views[9] = {&p.q, &p.k, &p.v, &p.o, &p.dout, &p.dq, &p.dk, &p.dv, &p.o_merged};
  for (int i = 0; i < 9; ++i) {
    cl_ulong *fields[4] = {&views[i]->offset, &views[i]->batch, &views[i]->seq,
                           &views[i]->head};
    for (int f = 0; f < 4; ++f) want[n++] = *fields[f] = fclu_next(&rng);
  }
  cl_ulong *wide[7] = {&p.lse_batch, &p.lse_head, &p.tokens_q, &p.tokens_k, &p.o_split,
                       &p.lse_split, &p.table_batch};
  for (int f = 0; f < 7; ++f) want[n++] = *wide[f] = fclu_next(&rng);
  cl_int *ints[14] = {&p.batch,       &p.heads_q,      &p.heads_kv, &p.head_dim,
                      &p.seqlen_q,    &p.seqlen_k,     &p.window_left, &p.window_right,
                      &p.ragged,      &p.work_items,   &p.vec4,     &p.alibi_batch,
                      &p.splits,      &p.split_keys};
  for (int f = 0; f < 14; ++f) {
    *ints[f] = (cl_int)(uint32_t)fclu_next(&rng);
    want[n++] = (cl_ulong)(int64_t)*ints[f];
  }
  cl_float *floats[4] = {&p.scale, &p.exp_factor, &p.lse_factor, &p.softcap};
  for (int f = 0; f < 4; ++f) {
    *floats[f] = (float)(fclu_uniform(&rng) * 1e3);
    uint32_t bits;
    memcpy(&bits, floats[f], sizeof bits);
    want[n++] = bits;
  }
  cl_int *tail[2] = {&p.page_size, &p.num_pages};
  for (int f = 0; f < 2; ++f) {
    *tail[f] = (cl_int)(uint32_t)fclu_next(&rng);
    want[n++] = (cl_ulong)(int64_t)*tail[f];
  }
  /* a quantized KV cache's form and V scale */
  p.kv_dtype = (cl_int)(uint32_t)fclu_next(&rng);
  want[n++] = (cl_ulong)(int64_t)p.kv_dtype;
  p.v_scale = (float)(fclu_uniform(&rng) * 1e3);
  {
    uint32_t bits;
    memcpy(&bits, &p.v_scale, sizeof bits);
    want[n++] = bits;
  }
  /* a value head size of its own */
  p.head_dim_v = (cl_int)(uint32_t)fclu_next(&rng);
  want[n++] = (cl_ulong)(int64_t)p.head_dim_v;
  ck_assert_int_eq(n, FIELDS);

  /* every buffer but o holds its place in the list */
  fcl__attention_buffers b;
  cl_mem out = fclu_poisoned_buffer(ctx, (FIELDS + BUFFERS) * sizeof(cl_ulong));
  ck_assert_ptr_nonnull(out);
  cl_mem *floats_in[10] = {&b.q, &b.k, &b.v, &b.lse, &b.dout, &b.dsum, &b.dq, &b.dk, &b.dv,
                           &b.alibi};
  for (int i = 0; i < 10; ++i) float_arg(ctx, floats_in[i], (float)(i + 1), want, &n);
  b.o = out;
  b.seqs = one_int(ctx, 11);
  want[n++] = 11;
  b.work = one_int(ctx, 12);
  want[n++] = 12;
  b.pages = one_int(ctx, 13);
  want[n++] = 13;
  cl_mem *after_pages[2] = {&b.o_merged, &b.lse_merged};
  for (int i = 0; i < 2; ++i) float_arg(ctx, after_pages[i], (float)(i + 14), want, &n);
  b.arrivals = one_int(ctx, 16);
  want[n++] = 16;
  cl_mem *sink_buffers[3] = {&b.sinks, &b.dsinks, &b.dsink_parts};
  for (int i = 0; i < 3; ++i) float_arg(ctx, sink_buffers[i], (float)(i + 17), want, &n);

  cl_kernel kernel = probe_kernel(ctx);
  ck_assert_int_eq(fcl__set_attention_args(ctx, kernel, "params_probe", &b, &p, NULL),
                   FCL_SUCCESS);
  const size_t one = 1;
  ck_assert_int_eq(fcl__launch(ctx, kernel, "params_probe", 1, &one, &one), FCL_SUCCESS);
  cl_ulong got[FIELDS + BUFFERS];
  ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), out, CL_TRUE, 0, sizeof got,
                                       got, 0, NULL, NULL),
                   CL_SUCCESS);
  for (int i = 0; i < FIELDS + BUFFERS; ++i)
    ck_assert_msg(got[i] == want[i], "word %d of the probe: got %llx, the host passed %llx", i,
                  (unsigned long long)got[i], (unsigned long long)want[i]);
  printf("args: %d fields of the %zu-byte parameter block and %d buffers arrive as set\n",
         FIELDS, sizeof p, BUFFERS + 1);
  fcl__kernel_return(ctx, &kernel);
  cl_mem all[] = {b.q,    b.k,    b.v,     b.lse,   b.dout,     b.dsum,       b.dq,
                  b.dk,   b.dv,   b.alibi, b.seqs,  b.work,     b.pages,      b.o_merged,
                  b.lse_merged, b.arrivals, b.sinks, b.dsinks, b.dsink_parts, out};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
  fcl_context_release(ctx);
}
END_TEST

/* A host that sets more or fewer arguments than the kernel declares, or
 * plans other local memory than it has, is refused with a message. */
START_TEST(a_kernel_that_disagrees_with_the_host_is_refused) {
  fcl_context *ctx = th_context();
  cl_kernel kernel = probe_kernel(ctx);
  const fcl__arg none[1] = {{0, NULL}};
  ck_assert_int_eq(fcl__set_args(ctx, kernel, "params_probe", none, 1), FCL_ERROR_BUILD_FAILED);
  char says[64];  /* every buffer (o among them) and the parameter block */
  snprintf(says, sizeof says, "takes %d arguments, and the host sets 1", BUFFERS + 2);
  ck_assert_ptr_nonnull(strstr(fcl_context_last_error(ctx), says));
  ck_assert_int_eq(fcl__check_local_bytes(ctx, kernel, "params_probe", 0), FCL_SUCCESS);
  ck_assert_int_eq(fcl__check_local_bytes(ctx, kernel, "params_probe", 64), FCL_ERROR_BUILD_FAILED);
  ck_assert_ptr_nonnull(strstr(fcl_context_last_error(ctx), "planner's model of it is wrong"));
  /* the driver's own few bytes pass; a byte less than planned, or an
   * array more than a driver adds, does not */
  ck_assert(fcl__local_bytes_agree(4608, 4616) && fcl__local_bytes_agree(9216, 9232));
  ck_assert(!fcl__local_bytes_agree(4608, 4607));
  ck_assert(!fcl__local_bytes_agree(4608, 4608 + FCL__LOCAL_DRIVER_BYTES + 1));
  ck_assert_ptr_nonnull(strstr(fcl_context_last_error(ctx), "planner's model of it is wrong"));
  fcl__kernel_return(ctx, &kernel);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("args");
  TCase *tc = th_tcase("args");
  tcase_add_test(tc, the_parameter_block_arrives_field_by_field);
  tcase_add_test(tc, a_kernel_that_disagrees_with_the_host_is_refused);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
