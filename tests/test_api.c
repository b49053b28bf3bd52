/*
 * test_api.c — misuse of the public API: every bad argument gives its
 * documented status and a message naming it, and leaves the outputs alone.
 */
#include "harness.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>

START_TEST(version_and_names) {
  ck_assert_uint_eq(fcl_version_number(), FCL_VERSION_NUMBER);
  ck_assert_str_eq(fcl_status_str(FCL_SUCCESS), "FCL_SUCCESS");
  ck_assert_str_eq(fcl_status_str(FCL_ERROR_CLBLAST), "FCL_ERROR_CLBLAST");
  ck_assert_str_eq(fcl_status_str((fcl_status)12345), "FCL_STATUS_UNKNOWN");
  for (int s = 0; s <= FCL_ERROR_CLBLAST; ++s)
    ck_assert(strncmp(fcl_status_str((fcl_status)s), "FCL_", 4) == 0);
  ck_assert_str_eq(fcl_dtype_name(FCL_DTYPE_BF16), "bf16");
  ck_assert_uint_eq(fcl_dtype_size(FCL_DTYPE_F16), 2);
  ck_assert_uint_eq(fcl_dtype_size((fcl_dtype)9), 0);
  ck_assert_str_eq(fcl_algo_name(FCL_ALGO_NAIVE), "naive");
  ck_assert_str_eq(fcl_context_last_error(NULL), "no context (NULL)");
}
END_TEST

START_TEST(device_listing) {
  size_t n = 0;
  ck_assert_int_eq(fcl_devices(NULL, 0, NULL), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_devices(NULL, 0, &n), FCL_SUCCESS);
  ck_assert_uint_ge(n, 1);
  fcl_device_info info[8];
  size_t count = 0;
  ck_assert_int_eq(fcl_devices(info, 8, &count), FCL_SUCCESS);
  ck_assert_uint_eq(count, n);
  ck_assert(info[0].name[0] != '\0');
  ck_assert_uint_gt(info[0].limits.local_mem_bytes, 0);
  ck_assert_uint_gt(info[0].limits.max_work_group_size, 0);
}
END_TEST

START_TEST(context_selectors) {
  fcl_context *ctx = NULL;
  ck_assert_int_eq(fcl_context_create(NULL, NULL), FCL_ERROR_INVALID_ARGUMENT);
  const char *missing[] = {"no-such-device-anywhere", "all", "63:63"};
  for (size_t i = 0; i < 3; ++i) {
    ck_assert_int_eq(fcl_context_create(missing[i], &ctx), FCL_ERROR_DEVICE_NOT_FOUND);
    ck_assert_ptr_nonnull(ctx);  /* to carry the message */
    ck_assert(strlen(fcl_context_last_error(ctx)) > 10);
    /* A failed context refuses work with a clear status. */
    ck_assert_int_eq(fcl_context_set_count_io(ctx, 1), FCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_null(fcl_context_cl_queue(ctx));
    fcl_context_release(ctx);
  }
  fcl_device_info first;
  size_t n = 0;
  ck_assert_int_eq(fcl_devices(&first, 1, &n), FCL_SUCCESS);
  char selector[16];
  snprintf(selector, sizeof selector, "%u:%u", first.platform_index, first.device_index);
  ck_assert_int_eq(fcl_context_create(selector, &ctx), FCL_SUCCESS);
  fcl_device_info info;
  ck_assert_int_eq(fcl_context_device(ctx, &info), FCL_SUCCESS);
  ck_assert_str_eq(info.name, first.name);
  fcl_context_release(ctx);
  /* A substring of the name, in another case. */
  char part[8] = {0};
  for (int i = 0; i < 4 && first.name[i]; ++i)
    part[i] = (char)((first.name[i] >= 'a' && first.name[i] <= 'z') ? first.name[i] - 32
                                                                     : first.name[i]);
  ck_assert_int_eq(fcl_context_create(part, &ctx), FCL_SUCCESS);
  fcl_context_release(ctx);
  fcl_context_release(NULL);
}
END_TEST

START_TEST(wrapping_a_callers_context) {
  fcl_context *owner = th_context();
  cl_context clctx = fcl_context_cl_context(owner);
  cl_device_id dev = fcl_context_cl_device(owner);
  cl_int err;
  cl_command_queue plain = clCreateCommandQueue(clctx, dev, 0, &err);  /* no profiling */
  ck_assert_int_eq(err, CL_SUCCESS);
  fcl_context *wrapped = NULL;
  ck_assert_int_eq(fcl_context_wrap(clctx, dev, plain, NULL), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_wrap(clctx, dev, plain, &wrapped), FCL_SUCCESS);
  ck_assert_ptr_eq(fcl_context_cl_queue(wrapped), plain);

  /* It computes, on the caller's queue, with host timing. */
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 2, 1, 9, 11, 16);
  th_problem p;
  th_problem_init(&p, wrapped, &desc, 1, 1.0);
  th_reference ref = th_reference_forward(&p);
  th_forward run = th_run_forward(wrapped, &p, FCL_ALGO_FLASH, 1);
  ck_assert_int_eq(run.status, FCL_SUCCESS);
  ck_assert(run.info.ms > 0);
  ck_assert(fclu_max_abs_err(run.o, ref.o, p.q_elems) < 1e-5);
  th_forward_free(&run);
  th_reference_free(&ref);
  th_problem_free(&p);

  /* Releasing the wrapper leaves the caller's objects usable. */
  fcl_context_release(wrapped);
  ck_assert_int_eq(clFinish(plain), CL_SUCCESS);
  clReleaseCommandQueue(plain);
  fcl_context_release(owner);
}
END_TEST

/* A valid problem and buffers to break one argument at a time. */
typedef struct fixture {
  fcl_context *ctx;
  fcl_attention_desc desc;
  th_problem p;
  cl_mem o, lse;
} fixture;

static void fixture_init(fixture *f) {
  f->ctx = th_context();
  fcl_attention_desc_init(&f->desc, 2, 4, 2, 5, 6, 8);
  th_problem_init(&f->p, f->ctx, &f->desc, 1, 1.0);
  f->o = fclu_poisoned_buffer(f->ctx, f->p.q_elems * sizeof(float));
  f->lse = fclu_poisoned_buffer(f->ctx, f->p.lse_elems * sizeof(float));
  ck_assert(f->o && f->lse);
}

static void fixture_free(fixture *f) {
  clReleaseMemObject(f->o);
  clReleaseMemObject(f->lse);
  th_problem_free(&f->p);
  fcl_context_release(f->ctx);
}

/* Calls the forward with `desc` and buffers, expects `want` and a message
 * containing `needle`, and checks both outputs are still poisoned. */
static void expect_failure(fixture *f, const fcl_attention_desc *desc, fcl_algo algo,
                           cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem lse,
                           fcl_status want, const char *needle) {
  fcl_run_info info;
  fcl_status got = fcl_attention_forward(f->ctx, desc, algo, q, k, v, o, lse, &info);
  ck_assert_msg(got == want, "want %s, got %s (%s)", fcl_status_str(want),
                fcl_status_str(got), fcl_context_last_error(f->ctx));
  const char *msg = fcl_context_last_error(f->ctx);
  ck_assert_msg(strstr(msg, needle) != NULL, "message \"%s\" lacks \"%s\"", msg, needle);
  float *out = malloc(f->p.q_elems * sizeof *out);
  ck_assert_int_eq(fclu_download(f->ctx, f->o, out, f->p.q_elems, FCL_DTYPE_F32), 0);
  for (size_t i = 0; i < f->p.q_elems; ++i) ck_assert(isnan(out[i]));
  ck_assert_int_eq(fclu_download(f->ctx, f->lse, out, f->p.lse_elems, FCL_DTYPE_F32), 0);
  for (size_t i = 0; i < f->p.lse_elems; ++i) ck_assert(isnan(out[i]));
  free(out);
}

START_TEST(forward_rejects_bad_arguments) {
  fixture f;
  fixture_init(&f);
  th_problem *p = &f.p;
  const fcl_algo algo = (fcl_algo)_i;  /* both algorithms */
  ck_assert_int_eq(fcl_attention_forward(NULL, &f.desc, algo, p->dq, p->dk, p->dv, f.o,
                                         f.lse, NULL),
                   FCL_ERROR_INVALID_ARGUMENT);
  expect_failure(&f, NULL, algo, p->dq, p->dk, p->dv, f.o, f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "desc");
  expect_failure(&f, &f.desc, algo, NULL, p->dk, p->dv, f.o, f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "q");
  expect_failure(&f, &f.desc, algo, p->dq, NULL, p->dv, f.o, f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "k");
  expect_failure(&f, &f.desc, algo, p->dq, p->dk, NULL, f.o, f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "v");
  expect_failure(&f, &f.desc, algo, p->dq, p->dk, p->dv, NULL, f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "o");
  expect_failure(&f, &f.desc, algo, p->dq, p->dk, p->dv, p->dq, f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "same buffer");
  expect_failure(&f, &f.desc, (fcl_algo)7, p->dq, p->dk, p->dv, f.o, f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "algo");

  struct {
    const char *field;
    size_t *slot;
    size_t value;
    fcl_status want;
    const char *needle;
  } sizes[] = {
      {"batch", &f.desc.batch, 0, FCL_ERROR_INVALID_SHAPE, "batch"},
      {"heads_q", &f.desc.heads_q, 0, FCL_ERROR_INVALID_SHAPE, "heads_q"},
      {"heads_kv", &f.desc.heads_kv, 0, FCL_ERROR_INVALID_SHAPE, "heads_kv"},
      {"seqlen_q", &f.desc.seqlen_q, 0, FCL_ERROR_INVALID_SHAPE, "seqlen_q"},
      {"seqlen_k", &f.desc.seqlen_k, 0, FCL_ERROR_INVALID_SHAPE, "seqlen_k"},
      {"head_dim", &f.desc.head_dim, 0, FCL_ERROR_INVALID_SHAPE, "head_dim"},
      {"heads_kv", &f.desc.heads_kv, 3, FCL_ERROR_INVALID_SHAPE, "not a multiple"},
      {"head_dim", &f.desc.head_dim, FCL_MAX_HEAD_DIM + 1, FCL_ERROR_UNSUPPORTED, "head_dim"},
      {"seqlen_q", &f.desc.seqlen_q, (size_t)1 << 40, FCL_ERROR_INVALID_SHAPE, "seqlen_q"},
      {"batch", &f.desc.batch, (size_t)1 << 30, FCL_ERROR_INVALID_SHAPE, "overflow"},
      {"seqlen_k", &f.desc.seqlen_k, 7, FCL_ERROR_BUFFER_TOO_SMALL, "buffer k"},
      {"seqlen_q", &f.desc.seqlen_q, 6, FCL_ERROR_BUFFER_TOO_SMALL, "buffer q"},
  };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    fcl_attention_desc saved = f.desc;
    *sizes[i].slot = sizes[i].value;
    if (sizes[i].value == (size_t)1 << 30) {  /* four big factors overflow */
      f.desc.seqlen_q = f.desc.seqlen_k = (size_t)1 << 20;
      f.desc.heads_q = f.desc.heads_kv = (size_t)1 << 20;
    }
    expect_failure(&f, &f.desc, algo, p->dq, p->dk, p->dv, f.o, f.lse, sizes[i].want,
                   sizes[i].needle);
    f.desc = saved;
  }

  const float bad_scales[] = {0.0f, -1.0f, NAN, INFINITY};
  for (size_t i = 0; i < 4; ++i) {
    fcl_attention_desc d = f.desc;
    d.scale = bad_scales[i];
    expect_failure(&f, &d, algo, p->dq, p->dk, p->dv, f.o, f.lse,
                   FCL_ERROR_INVALID_ARGUMENT, "scale");
  }
  fcl_attention_desc d = f.desc;
  d.causal = 2;
  expect_failure(&f, &d, algo, p->dq, p->dk, p->dv, f.o, f.lse, FCL_ERROR_INVALID_ARGUMENT,
                 "causal");
  d = f.desc;
  d.dtype = (fcl_dtype)5;
  expect_failure(&f, &d, algo, p->dq, p->dk, p->dv, f.o, f.lse, FCL_ERROR_INVALID_ARGUMENT,
                 "dtype");

  /* An LSE buffer one float short. */
  cl_int err;
  cl_mem short_lse = clCreateBuffer(fcl_context_cl_context(f.ctx), CL_MEM_READ_WRITE,
                                    (p->lse_elems - 1) * sizeof(float), NULL, &err);
  expect_failure(&f, &f.desc, algo, p->dq, p->dk, p->dv, f.o, short_lse,
                 FCL_ERROR_BUFFER_TOO_SMALL, "buffer lse");
  clReleaseMemObject(short_lse);

  /* A buffer of another OpenCL context. */
  fcl_context *other = th_context();
  cl_mem foreign = clCreateBuffer(fcl_context_cl_context(other), CL_MEM_READ_WRITE,
                                  p->kv_elems * sizeof(float), NULL, &err);
  expect_failure(&f, &f.desc, algo, p->dq, foreign, p->dv, f.o, f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "another OpenCL context");
  clReleaseMemObject(foreign);
  fcl_context_release(other);
  fixture_free(&f);
}
END_TEST

/* A valid backward problem: the fixture's plus dO, O, LSE and three
 * poisoned gradient buffers. */
typedef struct bwd_fixture {
  fixture f;
  th_grad_inputs g;
  cl_mem dq, dk, dv;
} bwd_fixture;

static void bwd_fixture_init(bwd_fixture *b) {
  fixture_init(&b->f);
  th_grad_inputs_init(&b->g, b->f.ctx, &b->f.p, 2);
  b->dq = fclu_poisoned_buffer(b->f.ctx, b->f.p.q_elems * sizeof(float));
  b->dk = fclu_poisoned_buffer(b->f.ctx, b->f.p.kv_elems * sizeof(float));
  b->dv = fclu_poisoned_buffer(b->f.ctx, b->f.p.kv_elems * sizeof(float));
  ck_assert(b->dq && b->dk && b->dv);
}

static void bwd_fixture_free(bwd_fixture *b) {
  clReleaseMemObject(b->dq);
  clReleaseMemObject(b->dk);
  clReleaseMemObject(b->dv);
  th_grad_inputs_free(&b->g);
  fixture_free(&b->f);
}

/* Calls the backward with one argument replaced (index 0..8 of q, k, v, o,
 * lse, dout, dq, dk, dv), expects `want` and a message containing `needle`,
 * and checks that the three gradients are still poisoned. */
static void expect_backward_failure(bwd_fixture *b, fcl_algo algo, int index, cl_mem with,
                                    fcl_status want, const char *needle) {
  th_problem *p = &b->f.p;
  cl_mem mems[9] = {p->dq, p->dk, p->dv, b->g.d_o, b->g.d_lse, b->g.d_dout,
                    b->dq, b->dk, b->dv};
  if (index >= 0) mems[index] = with;
  fcl_run_info info;
  fcl_status got = fcl_attention_backward(b->f.ctx, &b->f.desc, algo, mems[0], mems[1],
                                          mems[2], mems[3], mems[4], mems[5], mems[6],
                                          mems[7], mems[8], &info);
  const char *msg = fcl_context_last_error(b->f.ctx);
  ck_assert_msg(got == want, "want %s, got %s (%s)", fcl_status_str(want),
                fcl_status_str(got), msg);
  ck_assert_msg(strstr(msg, needle) != NULL, "message \"%s\" lacks \"%s\"", msg, needle);
  const cl_mem outs[3] = {b->dq, b->dk, b->dv};
  const size_t lens[3] = {p->q_elems, p->kv_elems, p->kv_elems};
  float *out = malloc(p->q_elems * sizeof *out);
  for (int i = 0; i < 3; ++i) {
    ck_assert_int_eq(fclu_download(b->f.ctx, outs[i], out, lens[i], FCL_DTYPE_F32), 0);
    for (size_t j = 0; j < lens[i]; ++j) ck_assert(isnan(out[j]));
  }
  free(out);
}

START_TEST(backward_rejects_bad_arguments) {
  bwd_fixture b;
  bwd_fixture_init(&b);
  th_problem *p = &b.f.p;
  const fcl_algo algo = (fcl_algo)_i;  /* both algorithms */
  ck_assert_int_eq(fcl_attention_backward(NULL, &b.f.desc, algo, p->dq, p->dk, p->dv,
                                          b.g.d_o, b.g.d_lse, b.g.d_dout, b.dq, b.dk,
                                          b.dv, NULL),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_attention_backward(b.f.ctx, NULL, algo, p->dq, p->dk, p->dv,
                                          b.g.d_o, b.g.d_lse, b.g.d_dout, b.dq, b.dk,
                                          b.dv, NULL),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(fcl_context_last_error(b.f.ctx), "desc"));
  static const char *const nulls[9] = {"buffer q is NULL",    "buffer k is NULL",
                                       "buffer v is NULL",    "buffer o is NULL",
                                       "buffer lse is NULL",  "buffer dout is NULL",
                                       "buffer dq is NULL",   "buffer dk is NULL",
                                       "buffer dv is NULL"};
  for (int i = 0; i < 9; ++i)
    expect_backward_failure(&b, algo, i, NULL, FCL_ERROR_INVALID_ARGUMENT, nulls[i]);
  /* Outputs that alias an input or each other. */
  expect_backward_failure(&b, algo, 6, b.g.d_dout, FCL_ERROR_INVALID_ARGUMENT,
                          "output dq is the same buffer as dout");
  expect_backward_failure(&b, algo, 8, b.dk, FCL_ERROR_INVALID_ARGUMENT,
                          "output dk is the same buffer as dv");
  expect_backward_failure(&b, algo, 7, p->dk, FCL_ERROR_INVALID_ARGUMENT,
                          "output dk is the same buffer as k");
  /* Buffers one element short. */
  cl_int err;
  cl_mem short_kv = clCreateBuffer(fcl_context_cl_context(b.f.ctx), CL_MEM_READ_WRITE,
                                   (p->kv_elems - 1) * sizeof(float), NULL, &err);
  cl_mem short_q = clCreateBuffer(fcl_context_cl_context(b.f.ctx), CL_MEM_READ_WRITE,
                                  (p->q_elems - 1) * sizeof(float), NULL, &err);
  expect_backward_failure(&b, algo, 7, short_kv, FCL_ERROR_BUFFER_TOO_SMALL, "buffer dk");
  expect_backward_failure(&b, algo, 5, short_q, FCL_ERROR_BUFFER_TOO_SMALL, "buffer dout");
  clReleaseMemObject(short_kv);
  clReleaseMemObject(short_q);
  expect_backward_failure(&b, (fcl_algo)7, -1, NULL, FCL_ERROR_INVALID_ARGUMENT, "algo");
  /* The descriptor is checked as for the forward. */
  b.f.desc.heads_kv = 3;
  expect_backward_failure(&b, algo, -1, NULL, FCL_ERROR_INVALID_SHAPE, "not a multiple");
  b.f.desc.heads_kv = 2;
  /* And the arguments were fine all along. */
  ck_assert_int_eq(fcl_attention_backward(b.f.ctx, &b.f.desc, algo, p->dq, p->dk, p->dv,
                                          b.g.d_o, b.g.d_lse, b.g.d_dout, b.dq, b.dk,
                                          b.dv, NULL),
                   FCL_SUCCESS);
  bwd_fixture_free(&b);
}
END_TEST

START_TEST(context_options_are_validated) {
  fcl_context *ctx = th_context();
  ck_assert_int_eq(fcl_context_set_count_io(NULL, 1), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_set_count_io(ctx, 2), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_set_scratch_limit(NULL, 1), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_set_block_table_checks(ctx, -1), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(fcl_context_last_error(ctx), "0 or 1"));
  fcl_plan bad = {0};
  bad.threads_per_row = 3;
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &bad), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(fcl_context_last_error(ctx), "threads_per_row"));
  bad.threads_per_row = 16;
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &bad), FCL_ERROR_INVALID_ARGUMENT);
  bad = (fcl_plan){.wg_size = 96};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &bad), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, NULL), FCL_SUCCESS);
  ck_assert_int_eq(fcl_context_device(ctx, NULL), FCL_ERROR_INVALID_ARGUMENT);
  const fcl_plan bad_hints[] = {
      {.block_k = 129}, {.rows_per_thread = 5}, {.wg_size = 2048},
      {.wg_size = 2, .threads_per_row = 4},
  };
  const char *names[] = {"block_k", "rows_per_thread", "wg_size", "wg_size"};
  for (size_t i = 0; i < 4; ++i) {
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &bad_hints[i]),
                     FCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(fcl_context_last_error(ctx), names[i]), "%s",
                  fcl_context_last_error(ctx));
  }
  ck_assert_int_eq(fcl_context_set_flash_tiling(NULL, NULL), FCL_ERROR_INVALID_ARGUMENT);
  fcl_context_release(ctx);
}
END_TEST

/* Every public function given NULL where a pointer or handle belongs. */
START_TEST(every_function_takes_null) {
  fcl_device_info info;
  ck_assert_int_eq(fcl_context_device(NULL, &info), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_ptr_null(fcl_context_cl_context(NULL));
  ck_assert_ptr_null(fcl_context_cl_device(NULL));
  ck_assert_ptr_null(fcl_context_cl_queue(NULL));
  ck_assert_int_eq(fcl_context_set_scratch_limit(NULL, 0), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_set_count_io(NULL, 0), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_set_block_table_checks(NULL, 1), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_set_flash_tiling(NULL, NULL), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_create("cpu", NULL), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_wrap(NULL, NULL, NULL, NULL), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_attention_forward(NULL, NULL, FCL_ALGO_FLASH, NULL, NULL, NULL, NULL,
                                         NULL, NULL),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_devices(NULL, 0, NULL), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(fcl_context_last_error(NULL), "no context (NULL)");
  fcl_context_release(NULL);
  fcl_attention_desc_init(NULL, 1, 1, 1, 1, 1, 1);
  ck_assert(fcl_attention_flops(NULL, FCL_PASS_FORWARD) == 0.0);
  ck_assert_str_eq(fcl_dtype_name((fcl_dtype)-1), "?");
  ck_assert_str_eq(fcl_algo_name((fcl_algo)2), "?");
  ck_assert_uint_eq(fcl_dtype_size((fcl_dtype)-1), 0);
  char why[64];
  fcl_device_limits lim;
  memset(&lim, 0, sizeof lim);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 1, 1, 8, 8, 16);
  fcl_plan plan;
  ck_assert_int_eq(fcl_plan_flash(NULL, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(why, "limits is NULL");
  ck_assert_int_eq(fcl_plan_flash(&lim, NULL, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(why, "desc is NULL");
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, NULL, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(why, "plan is NULL");
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 99),
                   FCL_ERROR_UNSUPPORTED);  /* no local memory */
  /* The program list: its own arguments named, the planner's refusals
   * kept, and nothing written on failure. */
  fcl_program_info programs[FCL_MAX_PASS_PROGRAMS];
  memset(programs, 0x5a, sizeof programs);
  unsigned count = 77;
  ck_assert_int_eq(fcl_flash_programs(&lim, &desc, FCL_PASS_FORWARD, NULL, &count, why,
                                      sizeof why), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(why, "out is NULL");
  ck_assert_int_eq(fcl_flash_programs(&lim, &desc, FCL_PASS_FORWARD, programs, NULL, why,
                                      sizeof why), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(why, "count is NULL");
  ck_assert_int_eq(fcl_flash_programs(NULL, &desc, FCL_PASS_FORWARD, programs, &count, why,
                                      sizeof why), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(why, "limits is NULL");
  ck_assert_int_eq(fcl_flash_programs(&lim, &desc, FCL_PASS_BACKWARD, programs, &count, why,
                                      sizeof why), FCL_ERROR_UNSUPPORTED);
  ck_assert(why[0] != '\0');
  ck_assert_uint_eq(count, 77);
  const unsigned char *bytes = (const unsigned char *)programs;
  for (size_t i = 0; i < sizeof programs; ++i) ck_assert_uint_eq(bytes[i], 0x5a);
  size_t n_profiles = 0;
  ck_assert_ptr_nonnull(fcl_device_profiles(NULL));
  ck_assert_ptr_nonnull(fcl_device_profiles(&n_profiles));
  ck_assert_uint_ge(n_profiles, 1);
}
END_TEST

START_TEST(device_listing_misuse) {
  size_t n = 77;
  ck_assert_int_eq(fcl_devices(NULL, 3, &n), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_uint_eq(n, 0);  /* written on failure too */
  ck_assert_int_eq(fcl_devices(NULL, 0, &n), FCL_SUCCESS);
  ck_assert_uint_ge(n, 1);
  /* A list shorter than the devices: filled up to capacity, count is all. */
  fcl_device_info one[1], guard;
  memset(&guard, 0x5a, sizeof guard);
  fcl_device_info two[2];
  two[1] = guard;
  size_t count = 0;
  ck_assert_int_eq(fcl_devices(two, 1, &count), FCL_SUCCESS);
  ck_assert_uint_eq(count, n);
  ck_assert(!memcmp(&two[1], &guard, sizeof guard));  /* nothing past capacity */
  ck_assert_int_eq(fcl_devices(one, 1, &count), FCL_SUCCESS);
  ck_assert_str_eq(one[0].name, two[0].name);
}
END_TEST

/* A descriptor of the given fields, the rest as fcl_attention_desc_init
 * sets them. */
static fcl_attention_desc made_desc(size_t b, size_t hq, size_t hkv, size_t nq, size_t nk,
                                    size_t d, fcl_dtype dtype, int causal, float scale) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, b, hq, hkv, nq, nk, d);
  desc.dtype = dtype;
  desc.causal = causal;
  desc.scale = scale;
  return desc;
}

START_TEST(planner_misuse) {
  fcl_device_limits lim;
  memset(&lim, 0, sizeof lim);
  lim.local_mem_bytes = 64 * 1024;
  lim.max_work_group_size = 256;
  lim.compute_units = 4;
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 4, 2, 100, 100, 64);
  fcl_plan plan, untouched;
  memset(&untouched, 0x7e, sizeof untouched);
  char why[200];
  const struct {
    const char *what;
    fcl_attention_desc desc;
    fcl_pass pass;
    fcl_status want;
    const char *needle;
  } bad[] = {
      {"pass", desc, (fcl_pass)7, FCL_ERROR_INVALID_ARGUMENT, "pass = 7"},
      {"heads", made_desc(1, 4, 3, 100, 100, 64, FCL_DTYPE_F32, 0, 0.125f), FCL_PASS_FORWARD,
       FCL_ERROR_INVALID_SHAPE, "not a multiple"},
      {"seqlen_k", made_desc(1, 4, 2, 100, 0, 64, FCL_DTYPE_F32, 0, 0.125f), FCL_PASS_FORWARD,
       FCL_ERROR_INVALID_SHAPE, "seqlen_k is 0"},
      {"scale", made_desc(1, 4, 2, 100, 100, 64, FCL_DTYPE_F32, 0, NAN), FCL_PASS_FORWARD,
       FCL_ERROR_INVALID_ARGUMENT, "scale"},
      {"scale", made_desc(1, 4, 2, 100, 100, 64, FCL_DTYPE_F32, 0, -1.0f), FCL_PASS_FORWARD,
       FCL_ERROR_INVALID_ARGUMENT, "scale"},
      {"dtype", made_desc(1, 4, 2, 100, 100, 64, (fcl_dtype)3, 0, 0.125f), FCL_PASS_FORWARD,
       FCL_ERROR_INVALID_ARGUMENT, "dtype"},
      {"causal", made_desc(1, 4, 2, 100, 100, 64, FCL_DTYPE_F32, 5, 0.125f), FCL_PASS_FORWARD,
       FCL_ERROR_INVALID_ARGUMENT, "causal"},
      {"head_dim", made_desc(1, 4, 2, 100, 100, 577, FCL_DTYPE_F32, 0, 0.125f), FCL_PASS_FORWARD,
       FCL_ERROR_UNSUPPORTED, "head_dim = 577"},
      {"overflow",
       made_desc((size_t)1 << 20, (size_t)1 << 20, (size_t)1 << 20, (size_t)1 << 20, 1, 64,
        FCL_DTYPE_F32, 0, 0.125f),
       FCL_PASS_FORWARD, FCL_ERROR_INVALID_SHAPE, "overflow"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    plan = untouched;
    fcl_status st = fcl_plan_flash(&lim, &bad[i].desc, bad[i].pass, &plan, why, sizeof why);
    ck_assert_msg(st == bad[i].want, "%s: want %s, got %s (%s)", bad[i].what,
                  fcl_status_str(bad[i].want), fcl_status_str(st), why);
    ck_assert_msg(strstr(why, bad[i].needle), "%s: \"%s\" lacks \"%s\"", bad[i].what, why,
                  bad[i].needle);
    ck_assert_msg(!memcmp(&plan, &untouched, sizeof plan), "%s: plan written", bad[i].what);
  }
  /* The reason is cut to why_len, NUL-terminated; why_len 0 writes nothing. */
  fcl_attention_desc zero = desc;
  zero.batch = 0;
  memset(why, 'x', sizeof why);
  ck_assert_int_eq(fcl_plan_flash(&lim, &zero, FCL_PASS_FORWARD, &plan, why, 6),
                   FCL_ERROR_INVALID_SHAPE);
  ck_assert_str_eq(why, "batch");
  ck_assert_int_eq(why[6], 'x');
  memset(why, 'x', sizeof why);
  ck_assert_int_eq(fcl_plan_flash(&lim, &zero, FCL_PASS_FORWARD, &plan, why, 0),
                   FCL_ERROR_INVALID_SHAPE);
  ck_assert_int_eq(why[0], 'x');
  /* Success clears it. */
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_str_eq(why, "");
}
END_TEST

/* fcl_context_wrap refuses these handles, saying `needle`. */
static void assert_wrap_refused(cl_context c, cl_device_id d, cl_command_queue q,
                                const char *needle) {
  fcl_context *w = NULL;
  ck_assert_int_eq(fcl_context_wrap(c, d, q, &w), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(fcl_context_last_error(w), needle), "\"%s\" lacks \"%s\"",
                fcl_context_last_error(w), needle);
  fcl_context_release(w);
}

/* fcl_context_wrap with handles that do not belong together. */
START_TEST(wrap_misuse_names_the_argument) {
  fcl_context *owner = th_context(), *other = th_context();
  cl_context clctx = fcl_context_cl_context(owner);
  cl_device_id dev = fcl_context_cl_device(owner);
  cl_command_queue queue = fcl_context_cl_queue(owner);
  cl_command_queue foreign_queue = fcl_context_cl_queue(other);
  const struct {
    cl_context c;
    cl_device_id d;
    cl_command_queue q;
    const char *needle;
  } cases[] = {
      {NULL, dev, queue, "context is NULL"},
      {clctx, NULL, queue, "device is NULL"},
      {clctx, dev, NULL, "queue is NULL"},
      {clctx, dev, foreign_queue, "another OpenCL context"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    fcl_context *w = NULL;
    ck_assert_int_eq(fcl_context_wrap(cases[i].c, cases[i].d, cases[i].q, &w),
                     FCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(w);  /* carries the reason */
    ck_assert_msg(strstr(fcl_context_last_error(w), cases[i].needle), "\"%s\" lacks \"%s\"",
                  fcl_context_last_error(w), cases[i].needle);
    /* ... and refuses work, with a message. */
    ck_assert_ptr_null(fcl_context_cl_queue(w));
    ck_assert_int_eq(fcl_context_set_scratch_limit(w, 1), FCL_ERROR_INVALID_ARGUMENT);
    fcl_attention_desc desc;
    fcl_attention_desc_init(&desc, 1, 1, 1, 1, 1, 16);
    ck_assert_int_eq(fcl_attention_forward(w, &desc, FCL_ALGO_FLASH, NULL, NULL, NULL, NULL,
                                           NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    ck_assert(strstr(fcl_context_last_error(w), "not created successfully"));
    fcl_context_release(w);
  }

  /* An out-of-order queue, where the device has them. */
  cl_command_queue_properties can = 0;
  clGetDeviceInfo(dev, CL_DEVICE_QUEUE_PROPERTIES, sizeof can, &can, NULL);
  if (can & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) {
    cl_int err;
    cl_command_queue ooo =
        clCreateCommandQueue(clctx, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    assert_wrap_refused(clctx, dev, ooo, "out of order");
    clReleaseCommandQueue(ooo);
  } else {
    printf("api: the device has no out-of-order queues; that case was skipped\n");
  }

  /* A queue on another device of the same context: a sub-device. */
  cl_uint max_sub = 0;
  clGetDeviceInfo(dev, CL_DEVICE_PARTITION_MAX_SUB_DEVICES, sizeof max_sub, &max_sub, NULL);
  cl_device_partition_property props[] = {CL_DEVICE_PARTITION_EQUALLY, 1, 0};
  cl_device_id subs[64];
  cl_uint n_subs = 0;
  if (max_sub >= 2 && clCreateSubDevices(dev, props, 64, subs, &n_subs) == CL_SUCCESS &&
      n_subs >= 1) {
    cl_int err;
    cl_context both = clCreateContext(NULL, 1, &subs[0], NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_command_queue sub_queue = clCreateCommandQueue(both, subs[0], 0, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    /* The sub-device's queue, claimed for the parent device. */
    assert_wrap_refused(both, dev, sub_queue, "another device");
    fcl_context *w = NULL;
    /* The right device: it works. */
    ck_assert_int_eq(fcl_context_wrap(both, subs[0], sub_queue, &w), FCL_SUCCESS);
    fcl_context_release(w);
    clReleaseCommandQueue(sub_queue);
    clReleaseContext(both);
    for (cl_uint i = 0; i < n_subs; ++i) clReleaseDevice(subs[i]);
  } else {
    printf("api: the device cannot be partitioned; the other-device case was skipped\n");
  }
  fcl_context_release(other);
  fcl_context_release(owner);
}
END_TEST

/* Buffers the forward must refuse: read-only outputs, write-only inputs,
 * outputs that overlap another buffer through sub-buffers. Sub-buffers
 * that do not overlap work. */
START_TEST(forward_checks_buffer_flags_and_overlap) {
  fixture f;
  fixture_init(&f);
  th_problem *p = &f.p;
  const fcl_algo algo = (fcl_algo)_i;
  cl_context cl = fcl_context_cl_context(f.ctx);
  cl_int err;
  const size_t o_bytes = p->q_elems * sizeof(float), lse_bytes = p->lse_elems * sizeof(float);
  cl_mem ro = clCreateBuffer(cl, CL_MEM_READ_ONLY, o_bytes, NULL, &err);
  expect_failure(&f, &f.desc, algo, p->dq, p->dk, p->dv, ro, f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "buffer o is an output but was created "
                 "CL_MEM_READ_ONLY");
  clReleaseMemObject(ro);
  cl_mem wo = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, p->kv_elems * sizeof(float), NULL, &err);
  expect_failure(&f, &f.desc, algo, p->dq, p->dk, wo, f.o, f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "buffer v is an input but was created "
                 "CL_MEM_WRITE_ONLY");
  clReleaseMemObject(wo);

  /* One parent holding O and LSE, with an alignment the device accepts. */
  cl_uint align_bits = 0;
  clGetDeviceInfo(fcl_context_cl_device(f.ctx), CL_DEVICE_MEM_BASE_ADDR_ALIGN,
                  sizeof align_bits, &align_bits, NULL);
  size_t align = align_bits / 8 ? align_bits / 8 : 128;
  size_t lse_at = (o_bytes + align - 1) / align * align;
  cl_mem parent = clCreateBuffer(cl, CL_MEM_READ_WRITE, lse_at + lse_bytes, NULL, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  cl_buffer_region o_region = {0, o_bytes}, lse_region = {lse_at, lse_bytes};
  cl_buffer_region clash_region = {0, lse_bytes};  /* the start of O */
  cl_mem o_sub = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &o_region, &err);
  cl_mem lse_sub = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &lse_region, &err);
  cl_mem clash = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &clash_region, &err);
  ck_assert(o_sub && lse_sub && clash);
  expect_failure(&f, &f.desc, algo, p->dq, p->dk, p->dv, o_sub, clash,
                 FCL_ERROR_INVALID_ARGUMENT, "output o overlaps buffer lse");
  /* A buffer and its own sub-buffer, an output among them, are refused
   * even where their views share no byte (the whole parent as o ends where
   * LSE's sub-buffer starts): OpenCL leaves their concurrent use undefined.
   * Both ways round, and with the parent as an input; the parent, poisoned,
   * is left as it was. */
  const size_t parent_floats = (lse_at + lse_bytes) / sizeof(float);
  const float nan_value = NAN;
  ck_assert_int_eq(clEnqueueFillBuffer(fcl_context_cl_queue(f.ctx), parent, &nan_value,
                                       sizeof nan_value, 0, parent_floats * sizeof(float), 0,
                                       NULL, NULL),
                   CL_SUCCESS);
  expect_failure(&f, &f.desc, algo, p->dq, p->dk, p->dv, parent, lse_sub,
                 FCL_ERROR_INVALID_ARGUMENT,
                 "output o is the parent buffer of lse (a sub-buffer of it)");
  expect_failure(&f, &f.desc, algo, p->dq, p->dk, p->dv, o_sub, parent,
                 FCL_ERROR_INVALID_ARGUMENT,
                 "output o is a sub-buffer of lse (its parent buffer)");
  expect_failure(&f, &f.desc, algo, parent, p->dk, p->dv, f.o, lse_sub,
                 FCL_ERROR_INVALID_ARGUMENT,
                 "output lse is a sub-buffer of q (its parent buffer)");
  float *untouched = malloc(parent_floats * sizeof *untouched);
  ck_assert_int_eq(fclu_download(f.ctx, parent, untouched, parent_floats, FCL_DTYPE_F32), 0);
  for (size_t i = 0; i < parent_floats; ++i) ck_assert(isnan(untouched[i]));
  free(untouched);
  /* Disjoint sub-buffers of one parent compute the right answer. */
  th_reference ref = th_reference_forward(p);
  ck_assert_int_eq(fcl_attention_forward(f.ctx, &f.desc, algo, p->dq, p->dk, p->dv, o_sub,
                                         lse_sub, NULL),
                   FCL_SUCCESS);
  float *o = malloc(o_bytes), *lse = malloc(lse_bytes);
  ck_assert_int_eq(fclu_download(f.ctx, o_sub, o, p->q_elems, FCL_DTYPE_F32), 0);
  ck_assert_int_eq(fclu_download(f.ctx, lse_sub, lse, p->lse_elems, FCL_DTYPE_F32), 0);
  ck_assert(fclu_max_abs_err(o, ref.o, p->q_elems) < 1e-5);
  ck_assert(fclu_max_abs_err(lse, ref.lse, p->lse_elems) < 1e-5);
  free(o);
  free(lse);
  th_reference_free(&ref);
  clReleaseMemObject(clash);
  clReleaseMemObject(lse_sub);
  clReleaseMemObject(o_sub);
  clReleaseMemObject(parent);
  fixture_free(&f);
}
END_TEST

/* Buffers over the caller's host memory (CL_MEM_USE_HOST_PTR): an output
 * sharing host bytes with an input through two different cl_mem, or
 * through a sub-buffer of one, is refused and nothing is written; two
 * buffers over disjoint halves of one host array give the right answer.
 * Before the host ranges were compared, k and dk over the same memory
 * returned FCL_SUCCESS with dQ off by 0.05. */
START_TEST(outputs_sharing_host_memory_are_refused) {
  bwd_fixture b;
  bwd_fixture_init(&b);
  th_problem *p = &b.f.p;
  const fcl_algo algo = (fcl_algo)_i;
  cl_context cl = fcl_context_cl_context(b.f.ctx);
  const size_t kv_bytes = p->kv_elems * sizeof(float);
  cl_uint align_bits = 0;
  clGetDeviceInfo(fcl_context_cl_device(b.f.ctx), CL_DEVICE_MEM_BASE_ADDR_ALIGN,
                  sizeof align_bits, &align_bits, NULL);
  const size_t align = align_bits / 8 > 64 ? align_bits / 8 : 64;
  const size_t half = (kv_bytes + align - 1) / align * align;
  float *host = aligned_alloc(align, 2 * half);
  ck_assert_ptr_nonnull(host);
  memcpy(host, p->k, kv_bytes);
  cl_int err;
  /* k: the caller's host array; the problem's own k buffer put aside */
  cl_mem k_host = clCreateBuffer(cl, CL_MEM_USE_HOST_PTR, kv_bytes, host, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  cl_mem own_k = p->dk;
  p->dk = k_host;

  /* dk: a second buffer over the same bytes */
  cl_mem dk_same = clCreateBuffer(cl, CL_MEM_USE_HOST_PTR, kv_bytes, host, &err);
  expect_backward_failure(&b, algo, 7, dk_same, FCL_ERROR_INVALID_ARGUMENT,
                          "output dk shares host memory (CL_MEM_USE_HOST_PTR) with buffer k");
  /* o over host bytes that k covers in part */
  cl_mem o_host = clCreateBuffer(cl, CL_MEM_USE_HOST_PTR, p->q_elems * sizeof(float), host + 2,
                                 &err);
  expect_failure(&b.f, &b.f.desc, algo, p->dq, p->dk, p->dv, o_host, b.f.lse,
                 FCL_ERROR_INVALID_ARGUMENT, "output o shares host memory");
  /* dv as sub-buffers of a host buffer over the whole array: a sub-buffer's
   * host memory starts at its origin, so the lower half clashes with k and
   * the upper half does not */
  cl_mem whole = clCreateBuffer(cl, CL_MEM_USE_HOST_PTR, 2 * half, host, &err);
  cl_buffer_region lower = {0, kv_bytes}, upper = {half, kv_bytes};
  cl_mem dv_lower = clCreateSubBuffer(whole, 0, CL_BUFFER_CREATE_TYPE_REGION, &lower, &err);
  cl_mem dv_upper = clCreateSubBuffer(whole, 0, CL_BUFFER_CREATE_TYPE_REGION, &upper, &err);
  ck_assert(dk_same && o_host && whole && dv_lower && dv_upper);
  expect_backward_failure(&b, algo, 8, dv_lower, FCL_ERROR_INVALID_ARGUMENT,
                          "output dv shares host memory");
  ck_assert_mem_eq(host, p->k, kv_bytes);  /* what k holds, untouched */

  th_backward plain = th_run_backward(b.f.ctx, p, &b.g, algo);
  ck_assert_int_eq(plain.status, FCL_SUCCESS);
  ck_assert_int_eq(fclu_poison(b.f.ctx, dv_upper, kv_bytes), 0);
  ck_assert_int_eq(fcl_attention_backward(b.f.ctx, &b.f.desc, algo, p->dq, p->dk, p->dv,
                                          b.g.d_o, b.g.d_lse, b.g.d_dout, b.dq, b.dk,
                                          dv_upper, NULL),
                   FCL_SUCCESS);
  float *dv = malloc(kv_bytes);
  ck_assert_int_eq(fclu_download(b.f.ctx, dv_upper, dv, p->kv_elems, FCL_DTYPE_F32), 0);
  ck_assert_mem_eq(dv, plain.dv, kv_bytes);  /* disjoint host memory: the same bits */
  free(dv);
  th_backward_free(&plain);
  cl_mem all[] = {dv_upper, dv_lower, whole, o_host, dk_same, k_host};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
  p->dk = own_k;
  free(host);
  bwd_fixture_free(&b);
}
END_TEST

/* Handles that are no buffer: an image as an output, a command queue as
 * an input. Both INVALID_ARGUMENT naming the argument, nothing written
 * (before, the image ran with FCL_SUCCESS and the queue gave
 * BUFFER_TOO_SMALL). */
START_TEST(arguments_that_are_not_buffers_are_refused) {
  fixture f;
  fixture_init(&f);
  th_problem *p = &f.p;
  cl_image_format format = {CL_RGBA, CL_FLOAT};
  cl_image_desc image = {0};
  image.image_type = CL_MEM_OBJECT_IMAGE2D;
  image.image_width = image.image_height = 64;
  cl_int err;
  cl_mem img = clCreateImage(fcl_context_cl_context(f.ctx), CL_MEM_READ_WRITE, &format, &image,
                             NULL, &err);
  if (img) {
    expect_failure(&f, &f.desc, FCL_ALGO_FLASH, p->dq, p->dk, p->dv, img, f.lse,
                   FCL_ERROR_INVALID_ARGUMENT, "argument o is an image, not a buffer");
    expect_failure(&f, &f.desc, FCL_ALGO_NAIVE, p->dq, img, p->dv, f.o, f.lse,
                   FCL_ERROR_INVALID_ARGUMENT, "argument k is an image");
    clReleaseMemObject(img);
  } else {
    printf("api: the device makes no 2D float image (%d); that case skipped\n", (int)err);
  }
  expect_failure(&f, &f.desc, FCL_ALGO_FLASH, (cl_mem)fcl_context_cl_queue(f.ctx), p->dk,
                 p->dv, f.o, f.lse, FCL_ERROR_INVALID_ARGUMENT, "q");
  fixture_free(&f);
}
END_TEST

/* fcl_attention_buffer_sizes: the bytes of each buffer, and the
 * descriptor's checks with their statuses and reasons, nothing written on
 * failure. */
START_TEST(buffer_sizes_follow_the_descriptor) {
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 3, 8, 2, 5, 7, 40);
  d.dtype = FCL_DTYPE_BF16;
  fcl_buffer_sizes sz;
  char why[256] = "x";
  ck_assert_int_eq(fcl_attention_buffer_sizes(&d, &sz, why, sizeof why), FCL_SUCCESS);
  ck_assert_str_eq(why, "");
  ck_assert_uint_eq(sz.q, 3 * 5 * 8 * 40 * 2);
  ck_assert_uint_eq(sz.k, 3 * 7 * 2 * 40 * 2);
  ck_assert_uint_eq(sz.lse, 3 * 8 * 5 * 4);
  ck_assert(sz.o == sz.q && sz.dout == sz.q && sz.dq == sz.q);
  ck_assert(sz.v == sz.k && sz.dk == sz.k && sz.dv == sz.k);
  fcl_buffer_sizes untouched;
  memset(&untouched, 0xa5, sizeof untouched);
  const struct {
    size_t *slot;
    size_t value;
    fcl_status want;
    const char *needle;
  } bad[] = {{&d.batch, 0, FCL_ERROR_INVALID_SHAPE, "batch is 0"},
             {&d.batch, (size_t)INT_MAX + 1, FCL_ERROR_INVALID_SHAPE, "exceeds"},
             {&d.seqlen_q, (size_t)1 << 31, FCL_ERROR_INVALID_SHAPE, "seqlen_q"},
             {&d.heads_kv, 3, FCL_ERROR_INVALID_SHAPE, "not a multiple"},
             {&d.head_dim, FCL_MAX_HEAD_DIM + 1, FCL_ERROR_UNSUPPORTED, "FCL_MAX_HEAD_DIM"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    fcl_attention_desc saved = d;
    *bad[i].slot = bad[i].value;
    fcl_buffer_sizes out = untouched;
    ck_assert_int_eq(fcl_attention_buffer_sizes(&d, &out, why, sizeof why), bad[i].want);
    ck_assert_msg(strstr(why, bad[i].needle), "\"%s\" lacks \"%s\"", why, bad[i].needle);
    ck_assert_mem_eq(&out, &untouched, sizeof out);
    d = saved;
  }
  /* four factors of 2^20 overflow size_t */
  d.batch = d.seqlen_q = d.heads_q = (size_t)1 << 20;
  d.heads_kv = 1;
  d.head_dim = 16;
  ck_assert_int_eq(fcl_attention_buffer_sizes(&d, &sz, why, sizeof why), FCL_ERROR_INVALID_SHAPE);
  ck_assert_ptr_nonnull(strstr(why, "overflow"));
  ck_assert_int_eq(fcl_attention_buffer_sizes(NULL, &sz, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_attention_buffer_sizes(&d, NULL, NULL, 0), FCL_ERROR_INVALID_ARGUMENT);
}
END_TEST

/* Records of "== file options" lines in a FLASHCL_BUILD_LOG or
 * FLASHCL_BUILD_PTX file, and the bytes of the other lines. */
static int build_records(const char *path, size_t *body_bytes) {
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char line[2048];
  int records = 0;
  *body_bytes = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "== ", 3)) ++records;
    else *body_bytes += strlen(line);
  fclose(f);
  return records;
}

/* What fcl_flash_programs lists is what the library builds: every program
 * a forward and a backward build (FLASHCL_BUILD_LOG's records, here on a
 * shape no other test uses, so that nothing comes from the cache) appears
 * in the list with the same file and options, and nothing else is built.
 * FLASHCL_BUILD_PTX holds a record of each with its binary after it. */
START_TEST(listed_programs_are_the_built_ones) {
  char log_path[] = "/tmp/flashcl-build-log-XXXXXX", ptx_path[] = "/tmp/flashcl-build-ptx-XXXXXX";
  const int fd = mkstemp(log_path), fd_ptx = mkstemp(ptx_path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_ge(fd_ptx, 0);
  close(fd);
  close(fd_ptx);
  ck_assert_int_eq(setenv("FLASHCL_BUILD_LOG", log_path, 1), 0);
  ck_assert_int_eq(setenv("FLASHCL_BUILD_PTX", ptx_path, 1), 0);
  fcl_context *ctx = th_context();
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  const th_shape shape = {1, 3, 1, 37, 53, 40, 1};
  const fcl_attention_desc desc = th_shape_desc(&shape, FCL_DTYPE_F32);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 5, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 6);
  th_forward f = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  th_backward b = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
  ck_assert_int_eq(f.status, FCL_SUCCESS);
  ck_assert_int_eq(b.status, FCL_SUCCESS);
  unsetenv("FLASHCL_BUILD_LOG");
  unsetenv("FLASHCL_BUILD_PTX");

  fcl_program_info listed[2 * FCL_MAX_PASS_PROGRAMS];
  unsigned n_fwd = 0, n_bwd = 0;
  char why[256];
  ck_assert_int_eq(fcl_flash_programs(&dev.limits, &desc, FCL_PASS_FORWARD, listed, &n_fwd, why,
                                      sizeof why), FCL_SUCCESS);
  ck_assert_int_eq(fcl_flash_programs(&dev.limits, &desc, FCL_PASS_BACKWARD, listed + n_fwd,
                                      &n_bwd, why, sizeof why), FCL_SUCCESS);
  ck_assert_uint_eq(n_fwd, 1);
  ck_assert_uint_eq(n_bwd, 2);
  FILE *log = fopen(log_path, "r");
  ck_assert_ptr_nonnull(log);
  char line[2048];
  int records = 0, seen[2 * FCL_MAX_PASS_PROGRAMS] = {0};
  while (fgets(line, sizeof line, log)) {
    if (strncmp(line, "== ", 3)) continue;
    line[strcspn(line, "\n")] = '\0';
    ++records;
    int found = 0;
    for (unsigned i = 0; i < n_fwd + n_bwd; ++i) {
      char want[sizeof line];
      snprintf(want, sizeof want, "== %s %s", listed[i].file, listed[i].options);
      if (!strcmp(line, want)) found = seen[i] = 1;
    }
    ck_assert_msg(found, "built but not listed: %s", line + 3);
  }
  fclose(log);
  unlink(log_path);
  ck_assert_int_eq(records, (int)(n_fwd + n_bwd));
  size_t binary_bytes = 0;
  ck_assert_int_eq(build_records(ptx_path, &binary_bytes), records);
  ck_assert_uint_gt(binary_bytes, (size_t)records);  /* more than the newline after each */
  unlink(ptx_path);
  for (unsigned i = 0; i < n_fwd + n_bwd; ++i)
    ck_assert_msg(seen[i], "listed but not built: %s %s", listed[i].file, listed[i].options);
  th_forward_free(&f);
  th_backward_free(&b);
  th_grad_inputs_free(&g);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* FLASHCL_BUILD_LOG naming a FIFO: the build that would append to it goes
 * on at once (an alarm fails the test otherwise), the call succeeds and the
 * context's log says why nothing was written (host/core/file.c). */
START_TEST(a_fifo_as_the_build_log_is_skipped) {
  char dir[] = "/tmp/flashcl-build-log-XXXXXX", fifo[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(fifo, sizeof fifo, "%s/log", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  ck_assert_int_eq(setenv("FLASHCL_BUILD_LOG", fifo, 1), 0);
  fcl_context *ctx = th_context();
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 1, 2, 2, 16, 16, 16);
  th_problem p;
  th_problem_init(&p, ctx, &d, 5, 1.0);
  alarm(300);
  th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  alarm(0);
  ck_assert_msg(r.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  char log[4096];
  fcl_context_log(ctx, log, sizeof log);
  ck_assert_msg(strstr(log, "FLASHCL_BUILD_LOG") && strstr(log, "not a regular file"), "log: %s", log);
  th_forward_free(&r);
  th_problem_free(&p);
  fcl_context_release(ctx);
  unsetenv("FLASHCL_BUILD_LOG");
  unlink(fifo);
  rmdir(dir);
}
END_TEST

/* ---- the descriptor's newer fields ------------------------------------------
 * head_dim_v, V as a view of K (DeepSeek's latent attention), kv_dtype,
 * sinks, batch_invariant and the wgmma kernel hint, each broken one way
 * and called through the public entry points: the status and the reason
 * include/flashcl.h gives, and every output byte still the poison. */

/* A call's buffers, sized for a valid descriptor: inputs of random values,
 * outputs (and dsinks) poisoned. */
typedef struct field_bufs {
  cl_mem q, k, v, o, lse, dout, dq, dk, dv, dsinks;
  size_t bytes[4];  /* of o, dq, dk, dv */
  size_t lse_bytes, dsinks_bytes;
} field_bufs;

static cl_mem random_input(fcl_context *ctx, size_t bytes, fcl_dtype dtype, uint64_t seed) {
  const size_t n = (bytes + fcl_dtype_size(dtype) - 1) / fcl_dtype_size(dtype);
  float *x = malloc((n ? n : 1) * sizeof *x);
  ck_assert_ptr_nonnull(x);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + seed);
  fclu_fill_normal(&rng, x, n, 1.0, dtype);
  cl_mem mem = fclu_upload(ctx, x, n, dtype);
  free(x);
  ck_assert_ptr_nonnull(mem);
  return mem;
}

static void field_bufs_init(field_bufs *b, fcl_context *ctx, const fcl_attention_desc *sized) {
  fcl_buffer_sizes s;
  char why[256];
  ck_assert_msg(fcl_attention_buffer_sizes(sized, &s, why, sizeof why) == FCL_SUCCESS, "%s", why);
  memset(b, 0, sizeof *b);
  b->q = random_input(ctx, s.q, sized->dtype, 401);
  b->k = random_input(ctx, s.k, sized->dtype, 402);
  b->v = random_input(ctx, s.v, sized->dtype, 403);
  b->dout = random_input(ctx, s.dout, sized->dtype, 404);
  const size_t out_bytes[4] = {s.o, s.dq, s.dk, s.dv};
  cl_mem *outs[4] = {&b->o, &b->dq, &b->dk, &b->dv};
  for (int i = 0; i < 4; ++i) {
    b->bytes[i] = out_bytes[i];
    *outs[i] = fclu_poisoned_buffer(ctx, out_bytes[i]);
    ck_assert_ptr_nonnull(*outs[i]);
  }
  b->lse_bytes = s.lse;
  b->lse = fclu_poisoned_buffer(ctx, s.lse);
  b->dsinks_bytes = sized->heads_q * sizeof(float);
  b->dsinks = fclu_poisoned_buffer(ctx, b->dsinks_bytes);
  ck_assert(b->lse && b->dsinks);
}

static void field_bufs_free(field_bufs *b) {
  cl_mem all[] = {b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv, b->dsinks};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i) clReleaseMemObject(all[i]);
}

static int all_ff(const unsigned char *x, size_t bytes) {
  size_t i = 0;
  while (i < bytes && x[i] == 0xff) ++i;
  return i == bytes;
}

/* Whether every byte of `mem` is still the poison (0xFF). */
static int still_poison(fcl_context *ctx, cl_mem mem, size_t bytes) {
  unsigned char *x = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(x);
  ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), mem, CL_TRUE, 0, bytes, x, 0,
                                       NULL, NULL),
                   CL_SUCCESS);
  const int all = all_ff(x, bytes);
  free(x);
  return all;
}

/* One broken descriptor: `call` as the call gets it, buffers sized for
 * `sized`; v_is_k passes K's buffer as V (a latent-attention view);
 * sinks, a buffer of that many floats (0: none); `hint`'s kernel or
 * splits, when set, as the context's tiling. */
typedef struct field_probe {
  const char *what;
  fcl_attention_desc call, sized;
  fcl_pass pass;
  fcl_algo algo;
  fcl_plan hint;
  int v_is_k, with_dsinks;
  size_t sinks;
  fcl_status want;
  const char *needle;
} field_probe;

static void run_field_probe(fcl_context *ctx, const field_probe *pr) {
  field_bufs b;
  field_bufs_init(&b, ctx, &pr->sized);
  fcl_attention_desc d = pr->call;
  cl_mem sinks = NULL;
  if (pr->sinks) {
    sinks = random_input(ctx, pr->sinks * sizeof(float), FCL_DTYPE_F32, 405);
    d.sinks = sinks;
  }
  if (pr->with_dsinks) d.dsinks = b.dsinks;
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, fcl_tiling_hint_given(&pr->hint) ? &pr->hint
                                                                                    : NULL),
                   FCL_SUCCESS);
  cl_mem v = pr->v_is_k ? b.k : b.v;
  const fcl_status got =
      pr->pass == FCL_PASS_FORWARD
          ? fcl_attention_forward(ctx, &d, pr->algo, b.q, b.k, v, b.o, b.lse, NULL)
          : fcl_attention_backward(ctx, &d, pr->algo, b.q, b.k, v, b.o, b.lse, b.dout, b.dq,
                                   b.dk, b.dv, NULL);
  const char *msg = fcl_context_last_error(ctx);
  ck_assert_msg(got == pr->want, "%s (%s): want %s, got %s (%s)", pr->what,
                fcl_algo_name(pr->algo), fcl_status_str(pr->want), fcl_status_str(got), msg);
  ck_assert_msg(strlen(msg) > 0 && strstr(msg, pr->needle) != NULL,
                "%s: the message \"%s\" lacks \"%s\"", pr->what, msg, pr->needle);
  if (pr->pass == FCL_PASS_FORWARD) {
    ck_assert_msg(still_poison(ctx, b.o, b.bytes[0]), "%s: O written", pr->what);
    ck_assert_msg(still_poison(ctx, b.lse, b.lse_bytes), "%s: LSE written", pr->what);
  } else {
    ck_assert_msg(still_poison(ctx, b.dq, b.bytes[1]) && still_poison(ctx, b.dk, b.bytes[2]) &&
                      still_poison(ctx, b.dv, b.bytes[3]),
                  "%s: a gradient written", pr->what);
    ck_assert_msg(still_poison(ctx, b.dsinks, b.dsinks_bytes), "%s: dsinks written", pr->what);
  }
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, NULL), FCL_SUCCESS);
  if (sinks) clReleaseMemObject(sinks);
  field_bufs_free(&b);
}

/* batch 1, 2 heads, 3 queries over 40 keys. */
static fcl_attention_desc field_desc(size_t head_dim, size_t head_dim_v, fcl_dtype dtype) {
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 1, 2, 2, 3, 40, head_dim);
  d.head_dim_v = head_dim_v;
  d.dtype = dtype;
  return d;
}

START_TEST(newer_descriptor_fields_are_refused) {
  fcl_context *ctx = th_context();
  const fcl_dtype f32 = FCL_DTYPE_F32, f16 = FCL_DTYPE_F16;
  const fcl_pass fwd = FCL_PASS_FORWARD, bwd = FCL_PASS_BACKWARD;
  const fcl_algo flash = FCL_ALGO_FLASH, naive = FCL_ALGO_NAIVE;
  const fcl_plan none = {0}, mma = {.kernel = FCL_FLASH_KERNEL_MMA},
                 wgmma = {.kernel = FCL_FLASH_KERNEL_WGMMA},
                 decode = {.kernel = FCL_FLASH_KERNEL_DECODE},
                 simt_split = {.kernel = FCL_FLASH_KERNEL_SIMT, .splits = 2};
  const fcl_attention_desc plain = field_desc(64, 0, f32), two = field_desc(64, 32, f32),
                           wide = field_desc(FCL_MAX_HEAD_DIM, FCL_MAX_HEAD_DIM + 1, f32),
                           mla = field_desc(576, 512, f32);
  /* V as K's first 512 columns: K's layout (packed), 512 wide */
  fcl_attention_desc mla_view = mla;
  mla_view.v.head_stride = 576;
  mla_view.v.seq_stride = 2 * 576;
  mla_view.v.batch_stride = 40 * 2 * 576;
  fcl_attention_desc mla_short = mla_view, mla_overlap = mla_view, mla_past = mla_view;
  mla_short.seqlen_k = 39;          /* buffers sized for a key fewer */
  mla_overlap.v.seq_stride = 256;   /* rows of 512 columns 256 apart */
  mla_past.v.offset = 65;           /* the last row's end one element past K's */
  fcl_attention_desc odd_v = field_desc(576, 510, f32);  /* the decode kernel's 4 */
  fcl_attention_desc q8 = field_desc(64, 0, f32), q4_48 = field_desc(48, 0, f32),
                     kv_bad = plain, fp8_nan = field_desc(64, 0, f32), q8_two = two;
  q8.kv_dtype = FCL_KV_Q8_0;
  q4_48.kv_dtype = FCL_KV_Q4_0;
  kv_bad.kv_dtype = (fcl_kv_dtype)9;
  fp8_nan.kv_dtype = FCL_KV_FP8_E4M3;
  fcl_attention_desc fp8 = fp8_nan;
  fp8_nan.k_scale = NAN;
  q8_two.kv_dtype = FCL_KV_Q8_0;
  fcl_attention_desc inv2 = plain, inv_neg = plain;
  inv2.batch_invariant = 2;
  inv_neg.batch_invariant = -1;
  const fcl_attention_desc h16 = field_desc(64, 0, f16), h16_two = field_desc(64, 32, f16),
                           h16_wide = field_desc(256, 0, f16);
  fcl_attention_desc q4_sized = q4_48;
  q4_sized.kv_dtype = FCL_KV_AS_DTYPE;

  const field_probe probes[] = {
      /* head_dim_v */
      {"head_dim_v over the maximum", wide, plain, fwd, flash, none, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim_v"},
      {"head_dim_v over the maximum", wide, plain, fwd, naive, none, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim_v"},
      {"head_dim_v over the maximum, backward", wide, plain, bwd, flash, none, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim_v"},
      {"head_dim_v over the maximum, backward", wide, plain, bwd, naive, none, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim_v"},
      {"head_dim_v not a multiple of the decode kernel's 4", odd_v, odd_v, fwd, flash, none, 0,
       0, 0, FCL_ERROR_UNSUPPORTED, "vec4"},
      {"head_dim_v on the MMA kernels", two, two, fwd, flash, mma, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim_v"},
      {"head_dim_v on the MMA backward", two, two, bwd, flash, mma, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim_v"},
      {"head_dim_v on the wgmma forward", h16_two, h16_two, fwd, flash, wgmma, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim_v"},
      {"head_dim_v in key splits", two, two, fwd, flash, simt_split, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim_v"},
      {"head_dim_v wider than V and O hold", field_desc(64, 96, f32), plain, fwd, naive, none,
       0, 0, 0, FCL_ERROR_BUFFER_TOO_SMALL, "buffer v"},
      {"head_dim_v wider than V and O hold", field_desc(64, 96, f32), plain, fwd, flash, none,
       0, 0, 0, FCL_ERROR_BUFFER_TOO_SMALL, "buffer v"},
      {"head_dim_v wider than V holds, backward", field_desc(64, 96, f32), plain, bwd, naive,
       none, 0, 0, 0, FCL_ERROR_BUFFER_TOO_SMALL, "buffer v"},
      {"latent widths in the backward", mla, mla, bwd, flash, none, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "backward"},
      /* MLA: V a view of K */
      {"V as K: a key short", mla_view, mla_short, fwd, flash, none, 1, 0, 0,
       FCL_ERROR_BUFFER_TOO_SMALL, "buffer k"},
      {"V as K: a key short", mla_view, mla_short, fwd, naive, none, 1, 0, 0,
       FCL_ERROR_BUFFER_TOO_SMALL, "buffer k"},
      {"V as K: rows that overlap", mla_overlap, mla_view, fwd, flash, none, 1, 0, 0,
       FCL_ERROR_INVALID_ARGUMENT, "overlap"},
      {"V as K: a view past K's buffer", mla_past, mla_view, fwd, flash, none, 1, 0, 0,
       FCL_ERROR_BUFFER_TOO_SMALL, "buffer v"},
      /* kv_dtype */
      {"a quantized cache in the backward", q8, q8, bwd, flash, none, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "quantized KV cache"},
      {"a quantized cache in the backward", q8, q8, bwd, naive, none, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "quantized KV cache"},
      {"Q4_0 at head_dim 48", q4_48, q4_sized, fwd, flash, none, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "multiple of 32"},
      {"Q4_0 at head_dim 48", q4_48, q4_sized, fwd, naive, none, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "multiple of 32"},
      {"kv_dtype outside the enum", kv_bad, plain, fwd, flash, none, 0, 0, 0,
       FCL_ERROR_INVALID_ARGUMENT, "kv_dtype"},
      {"kv_dtype outside the enum", kv_bad, plain, bwd, flash, none, 0, 0, 0,
       FCL_ERROR_INVALID_ARGUMENT, "kv_dtype"},
      {"an fp8 scale of NaN", fp8_nan, fp8, fwd, flash, none, 0, 0, 0,
       FCL_ERROR_INVALID_ARGUMENT, "k_scale"},
      {"a quantized cache with head_dim_v", q8_two, two, fwd, flash, none, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim_v"},
      /* sinks */
      {"sinks a float short", plain, plain, fwd, flash, none, 0, 0, 1, FCL_ERROR_BUFFER_TOO_SMALL,
       "sinks"},
      {"sinks a float short", plain, plain, fwd, naive, none, 0, 0, 1, FCL_ERROR_BUFFER_TOO_SMALL,
       "sinks"},
      {"sinks a float short, backward", plain, plain, bwd, flash, none, 0, 0, 1,
       FCL_ERROR_BUFFER_TOO_SMALL, "sinks"},
      {"sinks a float short, in key splits", plain, plain, fwd, flash, simt_split, 0, 0, 1,
       FCL_ERROR_BUFFER_TOO_SMALL, "sinks"},
      {"dsinks without sinks", plain, plain, bwd, flash, none, 0, 1, 0,
       FCL_ERROR_INVALID_ARGUMENT, "dsinks"},
      {"dsinks from the naive backward", plain, plain, bwd, naive, none, 0, 1, 2,
       FCL_ERROR_UNSUPPORTED, "dsinks"},
      /* batch_invariant */
      {"batch_invariant 2", inv2, plain, fwd, flash, none, 0, 0, 0, FCL_ERROR_INVALID_ARGUMENT,
       "batch_invariant"},
      {"batch_invariant 2", inv2, plain, fwd, naive, none, 0, 0, 0, FCL_ERROR_INVALID_ARGUMENT,
       "batch_invariant"},
      {"batch_invariant -1, backward", inv_neg, plain, bwd, flash, none, 0, 0, 0,
       FCL_ERROR_INVALID_ARGUMENT, "batch_invariant"},
      /* the wgmma hint */
      {"the wgmma hint in f32", plain, plain, fwd, flash, wgmma, 0, 0, 0, FCL_ERROR_UNSUPPORTED,
       "f16 and bf16"},
      {"the wgmma hint in the backward", h16, h16, bwd, flash, wgmma, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "forward"},
      {"the wgmma hint at head_dim 256", h16_wide, h16_wide, fwd, flash, wgmma, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim up to 128"},
      {"the decode hint with odd head_dim_v", odd_v, odd_v, fwd, flash, decode, 0, 0, 0,
       FCL_ERROR_UNSUPPORTED, "head_dim_v (510)"},
  };
  for (size_t i = 0; i < sizeof probes / sizeof *probes; ++i) run_field_probe(ctx, &probes[i]);
  fcl_context_release(ctx);
}
END_TEST

/* One forward of field_desc's shape with `sinks` (2 heads) and the
 * context's tiling `hint`: O and LSE as floats (O: [token][head][64]). */
static void sinks_forward(fcl_context *ctx, const fcl_attention_desc *desc, fcl_algo algo,
                          const float sinks[2], float *o, float *lse) {
  field_bufs b;
  field_bufs_init(&b, ctx, desc);
  fcl_attention_desc d = *desc;
  d.sinks = fclu_upload(ctx, sinks, 2, FCL_DTYPE_F32);
  ck_assert_ptr_nonnull(d.sinks);
  const fcl_status st = fcl_attention_forward(ctx, &d, algo, b.q, b.k, b.v, b.o, b.lse, NULL);
  ck_assert_msg(st == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  ck_assert_int_eq(fclu_download(ctx, b.o, o, 3 * 2 * 64, FCL_DTYPE_F32), 0);
  ck_assert_int_eq(fclu_download(ctx, b.lse, lse, 2 * 3, FCL_DTYPE_F32), 0);
  clReleaseMemObject(d.sinks);
  field_bufs_free(&b);
}

/* What the header promises where a newer field is not refused: a NaN or
 * +inf sink makes its head's O and LSE NaN and leaves the other head's
 * bits alone; the backward ignores batch_invariant; the wgmma hint runs
 * on a device without the instructions (emulated) and agrees with the
 * planner's kernel. */
START_TEST(newer_descriptor_fields_keep_their_promises) {
  fcl_context *ctx = th_context();
  const fcl_attention_desc d = field_desc(64, 0, FCL_DTYPE_F32);
  float o_ref[3 * 2 * 64], lse_ref[6], o[3 * 2 * 64], lse[6];
  for (int algo = 0; algo < 2; ++algo)
    for (int bad = 0; bad < 2; ++bad) {
      const float clean[2] = {0.5f, 0.25f}, broken[2] = {0.5f, bad ? INFINITY : NAN};
      sinks_forward(ctx, &d, (fcl_algo)algo, clean, o_ref, lse_ref);
      sinks_forward(ctx, &d, (fcl_algo)algo, broken, o, lse);
      for (int t = 0; t < 3; ++t) {
        for (int c = 0; c < 64; ++c) {
          ck_assert(isnan(o[(t * 2 + 1) * 64 + c]));
          ck_assert(memcmp(&o[(t * 2) * 64 + c], &o_ref[(t * 2) * 64 + c], sizeof(float)) == 0);
        }
        ck_assert(isnan(lse[3 + t]));  /* LSE: [head][token] */
        ck_assert(memcmp(&lse[t], &lse_ref[t], sizeof(float)) == 0);
      }
    }

  /* the backward with batch_invariant 1: the same bits as with 0 */
  field_bufs b;
  field_bufs_init(&b, ctx, &d);
  ck_assert_int_eq(fcl_attention_forward(ctx, &d, FCL_ALGO_FLASH, b.q, b.k, b.v, b.o, b.lse, NULL),
                   FCL_SUCCESS);
  unsigned char *grads[2][3];
  for (int inv = 0; inv < 2; ++inv) {
    fcl_attention_desc di = d;
    di.batch_invariant = inv;
    const cl_mem outs[3] = {b.dq, b.dk, b.dv};
    for (int i = 0; i < 3; ++i) ck_assert_int_eq(fclu_poison(ctx, outs[i], b.bytes[i + 1]), 0);
    ck_assert_int_eq(fcl_attention_backward(ctx, &di, FCL_ALGO_FLASH, b.q, b.k, b.v, b.o, b.lse,
                                            b.dout, b.dq, b.dk, b.dv, NULL),
                     FCL_SUCCESS);
    for (int i = 0; i < 3; ++i) {
      grads[inv][i] = malloc(b.bytes[i + 1]);
      ck_assert_ptr_nonnull(grads[inv][i]);
      ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), outs[i], CL_TRUE, 0,
                                           b.bytes[i + 1], grads[inv][i], 0, NULL, NULL),
                       CL_SUCCESS);
    }
  }
  for (int i = 0; i < 3; ++i) {
    ck_assert(!all_ff(grads[0][i], b.bytes[i + 1]));
    ck_assert(memcmp(grads[0][i], grads[1][i], b.bytes[i + 1]) == 0);
    free(grads[0][i]);
    free(grads[1][i]);
  }
  field_bufs_free(&b);

  /* the wgmma hint where the instructions are not: runs, and agrees */
  const fcl_attention_desc h = field_desc(64, 0, FCL_DTYPE_F16);
  field_bufs_init(&b, ctx, &h);
  float *runs[2];
  const size_t n = b.bytes[0] / 2;
  for (int w = 0; w < 2; ++w) {
    const fcl_plan wgmma = {.kernel = FCL_FLASH_KERNEL_WGMMA};
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, w ? &wgmma : NULL), FCL_SUCCESS);
    ck_assert_int_eq(fclu_poison(ctx, b.o, b.bytes[0]), 0);
    fcl_run_info info;
    const fcl_status st =
        fcl_attention_forward(ctx, &h, FCL_ALGO_FLASH, b.q, b.k, b.v, b.o, b.lse, &info);
    ck_assert_msg(st == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
    if (w) ck_assert_uint_eq(info.plan.kernel, FCL_FLASH_KERNEL_WGMMA);
    runs[w] = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(runs[w]);
    ck_assert_int_eq(fclu_download(ctx, b.o, runs[w], n, FCL_DTYPE_F16), 0);
  }
  double err = 0.0;
  for (size_t i = 0; i < n; ++i) err = fmax(err, fabs((double)runs[1][i] - runs[0][i]));
  ck_assert_msg(err < 1e-2, "the wgmma hint's O differs from the planner's by %g", err);
  free(runs[0]);
  free(runs[1]);
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, NULL), FCL_SUCCESS);
  field_bufs_free(&b);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("api");
  TCase *tc = th_tcase("misuse");
  tcase_add_test(tc, version_and_names);
  tcase_add_test(tc, device_listing);
  tcase_add_test(tc, context_selectors);
  tcase_add_test(tc, wrapping_a_callers_context);
  tcase_add_loop_test(tc, forward_rejects_bad_arguments, FCL_ALGO_FLASH, FCL_ALGO_NAIVE + 1);
  tcase_add_loop_test(tc, backward_rejects_bad_arguments, FCL_ALGO_FLASH, FCL_ALGO_NAIVE + 1);
  tcase_add_test(tc, context_options_are_validated);
  tcase_add_test(tc, a_fifo_as_the_build_log_is_skipped);
  tcase_add_test(tc, every_function_takes_null);
  tcase_add_test(tc, device_listing_misuse);
  tcase_add_test(tc, planner_misuse);
  tcase_add_test(tc, wrap_misuse_names_the_argument);
  tcase_add_loop_test(tc, forward_checks_buffer_flags_and_overlap, FCL_ALGO_FLASH,
                      FCL_ALGO_NAIVE + 1);
  tcase_add_loop_test(tc, outputs_sharing_host_memory_are_refused, FCL_ALGO_FLASH,
                      FCL_ALGO_NAIVE + 1);
  tcase_add_test(tc, arguments_that_are_not_buffers_are_refused);
  tcase_add_test(tc, buffer_sizes_follow_the_descriptor);
  tcase_add_test(tc, listed_programs_are_the_built_ones);
  tcase_add_test(tc, newer_descriptor_fields_are_refused);
  tcase_add_test(tc, newer_descriptor_fields_keep_their_promises);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
