/*
 * harness.h — what the Check suites share: a context per test (created in
 * the forked child: an OpenCL call in the parent before srunner_run_all
 * hangs the children), random problems uploaded to the device, runs that
 * poison their outputs first, and the float64 reference.
 */
#ifndef FLASHCL_TEST_HARNESS_H
#define FLASHCL_TEST_HARNESS_H

#include <check.h>

#include "flashcl.h"
#include "hostdata.h"
#include "reference.h"

/* PoCL compiles each kernel variant in seconds; Check's default is 4 s. */
#define TH_TIMEOUT_S 900

/** A context on $FLASHCL_TEST_DEVICE (default: the library's default),
 *  with tuned plans switched off (the rules plan every call); fails the
 *  test if none can be made. */
fcl_context *th_context(void);

/** A problem's shape as the suites list them in tables. */
typedef struct th_shape {
  size_t b, hq, hkv, nq, nk, d;
  int causal;
} th_shape;

/** The descriptor of `shape` in storage type `dtype`, scale 1/sqrt(d). */
fcl_attention_desc th_shape_desc(const th_shape *shape, fcl_dtype dtype);

/** The nearest head_dim the MMA forward takes (a multiple of 8 up to 128):
 *  d rounded up to a multiple of 8, at most 128. */
size_t th_mma_head_dim(size_t d);

/** Inputs of one problem, on the host (rounded to the storage type) and on
 *  the device. */
typedef struct th_problem {
  fcl_attention_desc desc;
  size_t q_elems, kv_elems, lse_elems;
  float *q, *k, *v;
  cl_mem dq, dk, dv;  /* device copies of q, k, v */
} th_problem;

/** Draws q, k, v from normal(0, sigma) (v: normal(0, 1)) with the suite's
 *  seed plus `seed`, and uploads them. */
void th_problem_init(th_problem *p, fcl_context *ctx, const fcl_attention_desc *desc,
                     uint64_t seed, double sigma);
void th_problem_free(th_problem *p);

/** Uploads the host arrays again, after a test has edited them. */
void th_problem_upload(th_problem *p, fcl_context *ctx);

/** Outputs of one forward run, downloaded. */
typedef struct th_forward {
  fcl_status status;
  fcl_run_info info;
  float *o, *lse;
} th_forward;

/** Runs the forward with poisoned outputs and downloads them (lse NULL when
 *  !with_lse). Never fails the test itself: check .status. */
th_forward th_run_forward(fcl_context *ctx, const th_problem *p, fcl_algo algo,
                          int with_lse);
void th_forward_free(th_forward *r);

/** The naive forward's O of a problem (packed layout, malloc'd): from the
 *  device where it runs the naive algorithm in the problem's storage type,
 *  else (f16 without cl_khr_fp16, as PoCL) its host emulation,
 *  fclref_naive_row. The yardstick of the flash suites' error rule. */
float *th_naive_output(fcl_context *ctx, const th_problem *p);

/** The float64 reference of a problem's forward. */
typedef struct th_reference {
  double *o, *lse;
} th_reference;

th_reference th_reference_forward(const th_problem *p);
void th_reference_free(th_reference *r);

/** What a backward needs beyond the problem's q, k, v: dO drawn from
 *  normal(0, 1), and O and LSE of the float64 reference forward rounded to
 *  float (so that only the backward's arithmetic is judged), on the host
 *  and the device. */
typedef struct th_grad_inputs {
  float *dout, *o, *lse;
  cl_mem d_dout, d_o, d_lse;
} th_grad_inputs;

void th_grad_inputs_init(th_grad_inputs *g, fcl_context *ctx, const th_problem *p,
                         uint64_t seed);
void th_grad_inputs_free(th_grad_inputs *g);

/** Gradients of one backward run, downloaded. */
typedef struct th_backward {
  fcl_status status;
  fcl_run_info info;
  float *dq, *dk, *dv;
} th_backward;

/** Runs the backward with poisoned outputs and downloads them. Never fails
 *  the test itself: check .status. */
th_backward th_run_backward(fcl_context *ctx, const th_problem *p, const th_grad_inputs *g,
                            fcl_algo algo);
void th_backward_free(th_backward *r);

/** The float64 reference gradients of a problem. */
typedef struct th_grad_reference {
  double *dq, *dk, *dv;
} th_grad_reference;

th_grad_reference th_reference_backward(const th_problem *p, const th_grad_inputs *g);

/* What reading D = rowsum(dO * O) from the stored O costs the flash
 * backward, bounded per gradient element: D_i moves by |dO_i . (o_i - O_i)|
 * (o rounded to the storage type, O exact) plus the rounding of an f32 dot
 * product of head_dim terms, d 2^-24 sum |dO_ic o_ic|; dS = scale P (dP - D)
 * moves by scale P_ij times that, and so dQ_i by scale dD_i sum_j P_ij |K_j|
 * and dK_j by scale sum_i P_ij dD_i |Q_i| (D enters linearly: no higher
 * order). dV does not depend on D. The naive algorithm never reads O.
 * out: the largest bound over dQ's, dK's and dV's elements. */
void th_d_floor(const th_problem *p, const th_grad_inputs *g, const double *o_exact,
                double out[3]);
void th_grad_reference_free(th_grad_reference *r);

/** What a causal problem with more queries than keys must give: rows that
 *  see no key (i < seqlen_q - seqlen_k) are all zeros in `rows` (Q's
 *  layout: O, or dQ) and -inf in `lse` (NULL: not checked); every other
 *  row is finite. `what` names the tensor in failure messages. */
void th_assert_blind_rows(const fcl_attention_desc *desc, const float *rows,
                          const float *lse, const char *what);

/** An output read back after a call that may have failed: 1 when every
 *  element is NaN (the poison: untouched), 0 when none is and the n
 *  elements equal want[] (whole), -1 otherwise (half written). */
int th_untouched_or_whole(const float *x, const float *want, size_t n);

/** Turns I/O counting on where the context's device can count (64-bit
 *  atomics); @return whether it did, so that a test compares counted bytes
 *  with the model only then. */
int th_count_io(fcl_context *ctx);

/** The suite's random seed: $FLASHCL_TEST_SEED if set, else drawn from the
 *  clock, so every run sees fresh inputs; printed once so that a failure can
 *  be reproduced. */
uint64_t th_seed(void);
/** How many times a test reruns a call whose bits must not change: the
 *  environment's FLASHCL_TEST_RERUNS (1 to 999999; more catch a race on a
 *  GPU), else `fallback`. */
int th_reruns(int fallback);

/** Half an ulp of storage type t, relative: 2^-11 (f16), 2^-8 (bf16); 0
 *  for f32, whose rounding the rules' other terms hold. */
double th_half_ulp(fcl_dtype t);
/** What the flash suites' rule (2 x the naive algorithm's error) allows
 *  beyond it for an output whose reference is ref (n values): 1e-6, and in
 *  16-bit types half an ulp of the output's size (one rounding more, as a
 *  split's partial O is stored: test_half.c's floor). */
double th_err_floor(fcl_dtype t, const double *ref, size_t n);

/** A short description of a problem for failure messages. */
const char *th_describe(const fcl_attention_desc *desc, char *buf, size_t len);

/** A test case with the harness's timeout. */
TCase *th_tcase(const char *name);

/** Runs a suite (fork mode unless CK_FORK=no); returns main's exit status. */
int th_run_suite(Suite *suite);

#endif
