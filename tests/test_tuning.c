/*
 * test_tuning.c — tuned plans (host/plan/tuning.c): bucket names and classes;
 * the database written and read back; corrupt, foreign and stale files and
 * entries that no longer fit skipped with a line in the context's log and
 * the rules planning every call; a tuned plan that differs from the rules'
 * is what a call runs (fcl_run_info.plan.tuned), with results within the
 * flash rule of the float64 reference; a tiling hint and
 * fcl_context_use_tuned_plans(0) take precedence.
 */
#include "harness.h"
#include "tuning.h"
#include "program.h"
#include "rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* A fresh folder for one test's databases. */
static void temp_dir(char *out, size_t len) {
  snprintf(out, len, "/tmp/flashcl-tuning-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(out));
}

static void write_text(const char *dir, const fcl_device_info *dev, const char *text) {
  char name[320], path[1400];
  fcl__tuning_file_name(dev, name, sizeof name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  ck_assert_int_eq(fclose(f), 0);
}

static void remove_dir(const char *dir, const fcl_device_info *dev) {
  char name[320], path[1400];
  fcl__tuning_file_name(dev, name, sizeof name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  unlink(path);
  rmdir(dir);
}

/* A database text for `dev` with the given entries (fcl__tuning_write). */
static char *database_text(const fcl_device_info *dev, const fcl__tuned_entry *e, size_t n) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fcl__tuning_write(f, dev, "2026-12-03T00:00:00Z", e, n), 0);
  ck_assert_int_eq(fclose(f), 0);
  return text;
}

static fcl_attention_desc bucket_shape(fcl_dtype dtype, size_t head_dim, int causal) {
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 2, 8, 8, 256, 256, head_dim);
  d.dtype = dtype;
  d.causal = causal;
  return d;
}

START_TEST(bucket_names_round_trip) {
  for (size_t i = 0; i < FCL__TUNING_BUCKETS; ++i) {
    const fcl__bucket b = fcl__bucket_at(i);
    ck_assert_uint_eq(fcl__bucket_index(&b), i);
    char name[48];
    fcl__bucket_name(&b, name, sizeof name);
    fcl__bucket back;
    ck_assert_msg(fcl__bucket_parse(name, &back), "%s", name);
    ck_assert_uint_eq(fcl__bucket_index(&back), i);
  }
  static const char *const bad[] = {"", "fwd", "fwd.f32.d64.full", "fwd.f32.d64.full.large.x",
                                    "fwd.f64.d64.full.large", "fwd.f32.d65.full.large",
                                    "fwd.f32.64.full.large", "fwd.f32.d64.masked.large",
                                    "fwd.f32.d64.full.huge", "back.f32.d64.full.large",
                                    "fwd..d64.full.large", "fwd.f32.d064.full.large"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    fcl__bucket b;
    ck_assert_msg(!fcl__bucket_parse(bad[i], &b), "'%s' parsed", bad[i]);
  }
}
END_TEST

START_TEST(buckets_classify_calls) {
  fcl_device_limits gpu = {.compute_units = 132, .is_gpu = 1};
  fcl__bucket b;
  char name[48];
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 4, 16, 16, 4096, 4096, 100);
  d.dtype = FCL_DTYPE_F16;
  d.causal = 1;
  ck_assert(fcl__bucket_of(&gpu, &d, FCL_PASS_FORWARD, &b));
  fcl__bucket_name(&b, name, sizeof name);
  ck_assert_str_eq(name, "fwd.f16.d128.causal.large");
  ck_assert(fcl__bucket_of(&gpu, &d, FCL_PASS_BACKWARD, &b));
  fcl__bucket_name(&b, name, sizeof name);
  ck_assert_str_eq(name, "bwd.f16.d128.causal.large");
  /* 16 x 1000 rows against 128 x 132: small */
  fcl_attention_desc_init(&d, 1, 16, 16, 1000, 1000, 32);
  ck_assert(fcl__bucket_of(&gpu, &d, FCL_PASS_FORWARD, &b));
  fcl__bucket_name(&b, name, sizeof name);
  ck_assert_str_eq(name, "fwd.f32.d32.full.small");
  /* 16 rows a sequence or fewer: decode, sized by sequences x KV heads */
  fcl_attention_desc_init(&d, 8, 32, 8, 16, 32768, 256);
  ck_assert(fcl__bucket_of(&gpu, &d, FCL_PASS_FORWARD, &b));
  fcl__bucket_name(&b, name, sizeof name);
  ck_assert_str_eq(name, "decode.f32.d256.full.small");
  d.batch = 17;
  ck_assert(fcl__bucket_of(&gpu, &d, FCL_PASS_FORWARD, &b));
  fcl__bucket_name(&b, name, sizeof name);
  ck_assert_str_eq(name, "decode.f32.d256.full.large");
  fcl_attention_desc_init(&d, 1, 1, 1, 17, 17, 257);
  ck_assert(!fcl__bucket_of(&gpu, &d, FCL_PASS_FORWARD, &b));
  /* every bucket's shapes are its own, on a large GPU and a small CPU */
  const fcl_device_limits cpu = {.compute_units = 2, .is_gpu = 0};
  const fcl_device_limits *devices[2] = {&gpu, &cpu};
  for (int k = 0; k < 2; ++k)
    for (size_t i = 0; i < FCL__TUNING_BUCKETS; ++i) {
      const fcl__bucket want = fcl__bucket_at(i);
      fcl_attention_desc shapes[2];
      const size_t n = fcl__bucket_shapes(devices[k], &want, shapes);
      fcl__bucket_name(&want, name, sizeof name);
      ck_assert_msg(n >= (want.size == 1 ? 2u : 0u), "%s: %zu shapes", name, n);
      for (size_t s = 0; s < n; ++s) {
        ck_assert(fcl__bucket_of(devices[k], &shapes[s],
                                 want.pass == 1 ? FCL_PASS_BACKWARD : FCL_PASS_FORWARD, &b));
        ck_assert_uint_eq(fcl__bucket_index(&b), i);
      }
    }
}
END_TEST

START_TEST(database_written_and_read_back) {
  fcl_device_info dev;
  memset(&dev, 0, sizeof dev);
  snprintf(dev.platform, sizeof dev.platform, "A \"quoted\" platform\\");
  snprintf(dev.name, sizeof dev.name, "Device\tX");
  snprintf(dev.driver, sizeof dev.driver, "1.2.3");
  fcl__tuned_entry e[3];
  memset(e, 0, sizeof e);
  ck_assert(fcl__bucket_parse("fwd.f16.d128.causal.large", &e[0].bucket));
  e[0].hint = (fcl_plan){.kernel = FCL_FLASH_KERNEL_MMA, .wg_size = 256, .block_k = 64};
  ck_assert(fcl__bucket_parse("bwd.f32.d64.full.small", &e[1].bucket));
  e[1].hint = (fcl_plan){.kernel = FCL_FLASH_KERNEL_SIMT, .wg_size = 64, .threads_per_row = 2,
                         .rows_per_thread = 2, .tile_elem_size = 4};
  ck_assert(fcl__bucket_parse("decode.bf16.d256.causal.small", &e[2].bucket));
  e[2].hint = (fcl_plan){.kernel = FCL_FLASH_KERNEL_DECODE, .wg_size = 128, .splits = 32};
  for (int i = 0; i < 3; ++i) {
    e[i].ms = 1.5 + i;
    e[i].rules_ms = 2.0 + i;
    snprintf(e[i].shapes, sizeof e[i].shapes, "B %d \"x\"", i);
  }
  char *text = database_text(&dev, e, 3);
  static fcl__tuning db;
  char why[400];
  ck_assert_msg(fcl__tuning_parse(text, &dev, 1, &db, why, sizeof why), "%s", why);
  ck_assert_str_eq(why, "");
  ck_assert_uint_eq(db.count, 3);
  for (int i = 0; i < 3; ++i) {
    const size_t at = fcl__bucket_index(&e[i].bucket);
    ck_assert(db.have[at]);
    ck_assert(fcl__same_plan(&db.plans[at], &e[i].hint));
  }
  /* another device, another platform: not this device's */
  fcl_device_info other = dev;
  snprintf(other.name, sizeof other.name, "Device Y");
  ck_assert(!fcl__tuning_parse(text, &other, 1, &db, why, sizeof why));
  ck_assert_ptr_nonnull(strstr(why, "another device"));
  other = dev;
  snprintf(other.platform, sizeof other.platform, "Another");
  ck_assert(!fcl__tuning_parse(text, &other, 1, &db, why, sizeof why));
  /* another driver: stale where required, else a note */
  other = dev;
  snprintf(other.driver, sizeof other.driver, "1.2.4");
  ck_assert(!fcl__tuning_parse(text, &other, 1, &db, why, sizeof why));
  ck_assert_ptr_nonnull(strstr(why, "stale"));
  ck_assert(fcl__tuning_parse(text, &other, 0, &db, why, sizeof why));
  ck_assert_ptr_nonnull(strstr(why, "1.2.3"));
  ck_assert_uint_eq(db.count, 3);
  free(text);
}
END_TEST

/* A device named "D" on platform "P", driver "1": the parser's tests. */
static fcl_device_info device_p_d_1(void) {
  fcl_device_info dev;
  memset(&dev, 0, sizeof dev);
  snprintf(dev.platform, sizeof dev.platform, "P");
  snprintf(dev.name, sizeof dev.name, "D");
  snprintf(dev.driver, sizeof dev.driver, "1");
  return dev;
}

START_TEST(corrupt_databases_are_refused) {
  const fcl_device_info dev = device_p_d_1();
  char kernels[17], head[256];
  fcl__kernels_fingerprint(kernels);
  snprintf(head, sizeof head,
           "{\"format\": \"flashcl-tuning\", \"version\": 1, \"platform\": \"P\", "
           "\"device\": \"D\", \"driver\": \"1\", \"kernels\": \"%s\", \"plans\": [",
           kernels);
  static const char *const plans[] = {
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"kernel\": \"simt\", \"wg_size\": 64}]}",
      /* and the broken ones */
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"kernel\": \"simt\", \"wg_size\": 64}]",
      "{\"bucket\": \"fwd.f32.d64.full.larg\", \"kernel\": \"simt\"}]}",
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"kernel\": \"cuda\"}]}",
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"threads_per_row\": 3}]}",
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"wg_size\": 100}]}",
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"wg_size\": -64}]}",
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"wg_size\": 64.5}]}",
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"wg_size\": 1e999}]}",
      "{\"kernel\": \"simt\"}]}",
      "{\"bucket\": \"fwd.f32.d64.full.large\"}, {\"bucket\": \"fwd.f32.d64.full.large\"}]}",
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"wg_size\": 64}]} trailing",
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"note\": \"a \\q escape\"}]}",
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"note\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
      "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}",
      "{\"bucket\": \"fwd.f32.d64.full.large\", \"wg_size\": 64",
      "",
  };
  static fcl__tuning db;
  char why[400], text[1024];
  for (size_t i = 0; i < sizeof plans / sizeof plans[0]; ++i) {
    snprintf(text, sizeof text, "%s%s", head, plans[i]);
    const int ok = fcl__tuning_parse(text, &dev, 1, &db, why, sizeof why);
    ck_assert_msg(ok == (i == 0), "plans %zu: %s (%s)", i, ok ? "taken" : "refused", why);
    ck_assert_uint_eq(db.count, i == 0 ? 1u : 0u);
  }
  /* a header that is not this format's */
  static const char *const heads[] = {
      "{\"format\": \"flashcl-tuning\", \"version\": 2, \"platform\": \"P\", \"device\": \"D\", "
      "\"driver\": \"1\", \"plans\": []}",
      "{\"format\": \"clblast\", \"version\": 1, \"platform\": \"P\", \"device\": \"D\", "
      "\"driver\": \"1\", \"plans\": []}",
      "{\"format\": \"flashcl-tuning\", \"version\": 1, \"platform\": \"P\", \"device\": \"D\", "
      "\"driver\": \"1\"}",
      "[]", "null", "{", "\x01\x02\x03"};
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; ++i)
    ck_assert_msg(!fcl__tuning_parse(heads[i], &dev, 1, &db, why, sizeof why), "head %zu", i);
}
END_TEST

/* The library's own database (require_driver 0) stays in use across driver
 * and kernel changes; a note says which, the cue to check it again. */
START_TEST(shipped_database_notes_other_kernels) {
  const fcl_device_info dev = device_p_d_1();
  char kernels[17], other[17];
  fcl__kernels_fingerprint(kernels);
  snprintf(other, sizeof other, "%s", kernels);
  other[0] = other[0] == '0' ? '1' : '0';
  static const struct {
    const char *driver, *kernels, *note;
  } cases[] = {
      {"1", NULL, NULL},  /* NULL kernels: these */
      {"1", "", NULL},    /* not recorded: no note */
      {"1", "other", "other kernels"},
      {"2", NULL, "driver 2"},
      {"2", "other", "driver 2 (the device runs 1); tuned with other kernels"},
  };
  static fcl__tuning db;
  char text[1024], why[400];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const char *k = !cases[i].kernels ? kernels : *cases[i].kernels ? other : "";
    snprintf(text, sizeof text,
             "{\"format\": \"flashcl-tuning\", \"version\": 1, \"platform\": \"P\", "
             "\"device\": \"D\", \"driver\": \"%s\", \"kernels\": \"%s\", \"plans\": "
             "[{\"bucket\": \"fwd.f32.d64.full.large\", \"kernel\": \"simt\"}]}",
             cases[i].driver, k);
    ck_assert_msg(fcl__tuning_parse(text, &dev, 0, &db, why, sizeof why), "case %zu: %s", i, why);
    ck_assert_uint_eq(db.count, 1);
    if (cases[i].note)
      ck_assert_msg(strstr(why, cases[i].note), "case %zu: '%s'", i, why);
    else
      ck_assert_msg(why[0] == '\0', "case %zu: '%s'", i, why);
    /* a user's file of other kernels or another driver is stale */
    ck_assert_int_eq(fcl__tuning_parse(text, &dev, 1, &db, why, sizeof why),
                     !cases[i].note && cases[i].kernels == NULL);
  }
}
END_TEST

/* The bucket entry whose plan differs from the rules' on `d`. */
static fcl__tuned_entry different_entry(fcl_context *ctx, const fcl_attention_desc *d) {
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  fcl_plan rules;
  char why[256];
  ck_assert_int_eq(fcl_plan_flash(&dev.limits, d, FCL_PASS_FORWARD, &rules, why, sizeof why),
                   FCL_SUCCESS);
  fcl__tuned_entry e;
  memset(&e, 0, sizeof e);
  ck_assert(fcl__bucket_of(&dev.limits, d, FCL_PASS_FORWARD, &e.bucket));
  e.hint = (fcl_plan){.kernel = FCL_FLASH_KERNEL_SIMT, .wg_size = 64, .threads_per_row = 1,
                      .rows_per_thread = rules.rows_per_thread == 4 ? 2 : 4};
  return e;
}

/* A test context with tuned plans on. */
static fcl_context *tuning_context(void) {
  fcl_context *ctx = th_context();
  ck_assert_int_eq(fcl_context_use_tuned_plans(ctx, 1), FCL_SUCCESS);
  return ctx;
}

START_TEST(tuned_plan_is_what_runs) {
  fcl_context *ctx = tuning_context();
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  char dir[64];
  temp_dir(dir, sizeof dir);
  const fcl_attention_desc d = bucket_shape(FCL_DTYPE_F32, 64, 1);
  const fcl__tuned_entry e = different_entry(ctx, &d);
  char *text = database_text(&dev, &e, 1);
  write_text(dir, &dev, text);
  free(text);
  ck_assert_int_eq(fcl_context_set_tuning_dir(ctx, dir), FCL_SUCCESS);
  fcl_tuning_info ti;
  ck_assert_int_eq(fcl_context_tuning(ctx, &ti), FCL_SUCCESS);
  ck_assert_uint_eq(ti.plans, 1);
  ck_assert_int_eq(ti.enabled, 1);
  ck_assert_ptr_nonnull(strstr(ti.source, dir));

  th_problem p;
  th_problem_init(&p, ctx, &d, 1, 1.0);
  th_reference ref = th_reference_forward(&p);
  th_forward tuned = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  ck_assert_msg(tuned.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  ck_assert_uint_eq(tuned.info.plan.tuned, 1);
  ck_assert_uint_eq(tuned.info.plan.rows_per_thread, e.hint.rows_per_thread);
  ck_assert_uint_eq(tuned.info.plan.wg_size, 64);
  fcl_plan shown;
  ck_assert_int_eq(fcl_context_plan(ctx, &d, FCL_PASS_FORWARD, &shown, NULL, 0), FCL_SUCCESS);
  ck_assert(fcl__same_plan(&shown, &tuned.info.plan));
  th_forward naive = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 1);
  ck_assert_int_eq(naive.status, FCL_SUCCESS);
  const double err = fclu_max_abs_err(tuned.o, ref.o, p.q_elems);
  const double naive_err = fclu_max_abs_err(naive.o, ref.o, p.q_elems);
  ck_assert_msg(err <= 2 * naive_err + 1e-6, "tuned plan: error %g, naive %g", err, naive_err);

  /* the backward and other buckets keep the rules */
  fcl_plan plan;
  ck_assert_int_eq(fcl_context_plan(ctx, &d, FCL_PASS_BACKWARD, &plan, NULL, 0), FCL_SUCCESS);
  ck_assert_uint_eq(plan.tuned, 0);
  fcl_attention_desc other = d;
  other.causal = 0;
  ck_assert_int_eq(fcl_context_plan(ctx, &other, FCL_PASS_FORWARD, &plan, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.tuned, 0);

  /* switched off: the rules; a hint: the hint */
  fcl_plan rules;
  ck_assert_int_eq(fcl_plan_flash(&dev.limits, &d, FCL_PASS_FORWARD, &rules, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_int_eq(fcl_context_use_tuned_plans(ctx, 0), FCL_SUCCESS);
  th_forward off = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  ck_assert_int_eq(off.status, FCL_SUCCESS);
  ck_assert_uint_eq(off.info.plan.tuned, 0);
  ck_assert(fcl__same_plan(&off.info.plan, &rules));
  ck_assert_int_eq(fcl_context_tuning(ctx, &ti), FCL_SUCCESS);
  ck_assert_int_eq(ti.enabled, 0);
  ck_assert_uint_eq(ti.plans, 1);
  ck_assert_int_eq(fcl_context_use_tuned_plans(ctx, 1), FCL_SUCCESS);
  const fcl_plan hint = {.wg_size = 128, .threads_per_row = 1, .rows_per_thread = 1};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  ck_assert_int_eq(fcl_context_plan(ctx, &d, FCL_PASS_FORWARD, &plan, NULL, 0), FCL_SUCCESS);
  ck_assert_uint_eq(plan.tuned, 0);
  ck_assert_uint_eq(plan.wg_size, 128);
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, NULL), FCL_SUCCESS);
  ck_assert_int_eq(fcl_context_use_tuned_plans(ctx, 2), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_set_tuning_dir(ctx, ""), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_set_tuning_dir(NULL, dir), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_tuning(ctx, NULL), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_uint_eq(fcl_context_log(ctx, NULL, 0), 0);

  th_forward_free(&tuned);
  th_forward_free(&naive);
  th_forward_free(&off);
  th_reference_free(&ref);
  th_problem_free(&p);
  remove_dir(dir, &dev);
  fcl_context_release(ctx);
}
END_TEST

/* Loads `text` as the device's database; the context's tuned plans after. */
static unsigned load(fcl_context *ctx, const char *dir, const char *text, char *log,
                     size_t log_len) {
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  write_text(dir, &dev, text);
  ck_assert_int_eq(fcl_context_set_tuning_dir(ctx, dir), FCL_SUCCESS);
  fcl_context_log(ctx, log, log_len);
  fcl_tuning_info ti;
  ck_assert_int_eq(fcl_context_tuning(ctx, &ti), FCL_SUCCESS);
  return ti.plans;
}

START_TEST(bad_databases_are_skipped_with_a_warning) {
  fcl_context *ctx = tuning_context();
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  char dir[64], log[8192];
  temp_dir(dir, sizeof dir);
  const fcl_attention_desc d = bucket_shape(FCL_DTYPE_F32, 64, 1);
  const fcl__tuned_entry e = different_entry(ctx, &d);
  char *good = database_text(&dev, &e, 1);
  ck_assert_uint_eq(load(ctx, dir, good, log, sizeof log), 1);

  /* corrupt: cut in half */
  char *cut = strdup(good);
  cut[strlen(cut) / 2] = '\0';
  ck_assert_uint_eq(load(ctx, dir, cut, log, sizeof log), 0);
  ck_assert_ptr_nonnull(strstr(log, "ignored: not a tuning database"));
  /* stale: another driver version */
  fcl_device_info older = dev;
  snprintf(older.driver, sizeof older.driver, "0.0-older-than-%.40s", dev.driver);
  char *stale = database_text(&older, &e, 1);
  ck_assert_uint_eq(load(ctx, dir, stale, log, sizeof log), 0);
  ck_assert_ptr_nonnull(strstr(log, "stale"));
  /* stale: measured on other kernels (another flashcl's), or not recorded */
  char *other_kernels = strdup(good);
  char *at = strstr(other_kernels, "\"kernels\": \"");
  ck_assert_ptr_nonnull(at);
  at[strlen("\"kernels\": \"")] ^= 1;  /* one hex digit changed */
  ck_assert_uint_eq(load(ctx, dir, other_kernels, log, sizeof log), 0);
  ck_assert_ptr_nonnull(strstr(log, "other kernels"));
  memcpy(at, "\"kernelz", 8);  /* a file without the fingerprint */
  ck_assert_uint_eq(load(ctx, dir, other_kernels, log, sizeof log), 0);
  ck_assert_ptr_nonnull(strstr(log, "not recorded"));
  free(other_kernels);
  /* foreign: another device's, under this device's name */
  fcl_device_info foreign = dev;
  snprintf(foreign.name, sizeof foreign.name, "Another GPU");
  char *other = database_text(&foreign, &e, 1);
  ck_assert_uint_eq(load(ctx, dir, other, log, sizeof log), 0);
  ck_assert_ptr_nonnull(strstr(log, "another device"));
  /* an entry that no longer plans here (2-byte tiles of f32 storage) */
  fcl__tuned_entry unfit[2] = {e, e};
  unfit[1].hint.tile_elem_size = 2;
  ck_assert(fcl__bucket_parse("fwd.f32.d128.full.large", &unfit[1].bucket));
  char *partly = database_text(&dev, unfit, 2);
  ck_assert_uint_eq(load(ctx, dir, partly, log, sizeof log), 1);
  ck_assert_ptr_nonnull(strstr(log, "fwd.f32.d128.full.large does not fit"));

  /* after all that, calls run, by the rules where nothing was taken */
  ck_assert_uint_eq(load(ctx, dir, cut, log, sizeof log), 0);
  th_problem p;
  th_problem_init(&p, ctx, &d, 2, 1.0);
  th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  ck_assert_int_eq(r.status, FCL_SUCCESS);
  ck_assert_uint_eq(r.info.plan.tuned, 0);
  th_forward_free(&r);
  th_problem_free(&p);
  /* an absent folder: nothing, silently */
  ck_assert_int_eq(fcl_context_set_tuning_dir(ctx, "/nonexistent/flashcl"), FCL_SUCCESS);
  fcl_tuning_info ti;
  ck_assert_int_eq(fcl_context_tuning(ctx, &ti), FCL_SUCCESS);
  ck_assert_uint_eq(ti.plans, 0);
  /* the log is bounded and truncated to the caller's buffer */
  char small[8];
  const size_t n = fcl_context_log(ctx, small, sizeof small);
  ck_assert_uint_gt(n, sizeof small);
  ck_assert_uint_eq(strlen(small), sizeof small - 1);
  free(good);
  free(cut);
  free(stale);
  free(other);
  free(partly);
  remove_dir(dir, &dev);
  fcl_context_release(ctx);
}
END_TEST

/* What stands at the database's name: made by `make` at `path`; `reason`
 * is what the log must say of it. */
typedef struct hostile_file {
  const char *what, *reason;
  int (*make)(const char *path);
} hostile_file;

static int make_fifo(const char *path) { return mkfifo(path, 0600); }
static int make_device(const char *path) { return symlink("/dev/zero", path); }
static int make_folder(const char *path) { return mkdir(path, 0700); }
static int make_loop(const char *path) { return symlink(path, path); }
static int make_oversized(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const int bad = ftruncate(fileno(f), (off_t)FCL__TUNING_FILE_MAX + 1);
  return fclose(f) || bad ? -1 : 0;
}

static void remove_any(const char *path) {
  if (unlink(path) != 0) rmdir(path);
}

/* How many lines of the context's log have both `a` and `b`. */
static int log_lines(fcl_context *ctx, const char *a, const char *b) {
  static char log[FCL__LOG_MAX + 1];
  fcl_context_log(ctx, log, sizeof log);
  int n = 0;
  for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n"))
    n += strstr(line, a) && strstr(line, b);
  return n;
}

/* A FIFO, a device, a folder, a symbolic-link loop or an oversized file at
 * the database's name, or one of them as the folder, through the setter, through
 * FLASHCL_TUNING_DIR (the setter's NULL and a new context): each returns at
 * once (an alarm fails the test otherwise) with a line in the log, and
 * nothing is loaded. */
START_TEST(hostile_files_are_skipped_promptly) {
  static const hostile_file files[] = {
      {"FIFO", "a FIFO", make_fifo},
      {"device", "a device", make_device},
      {"folder", "a folder", make_folder},
      {"symbolic-link loop", "symbolic links", make_loop},
      {"oversized file", "more than the", make_oversized},
  };
  fcl_context *ctx = tuning_context();
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  char dir[64], name[320], path[1400];
  temp_dir(dir, sizeof dir);
  fcl__tuning_file_name(&dev, name, sizeof name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i)
    for (int via_env = 0; via_env < 3; ++via_env) {
      ck_assert_msg(files[i].make(path) == 0, "cannot make a %s", files[i].what);
      alarm(60);  /* a blocked open ends the test here, not at Check's timeout */
      fcl_context *c = ctx;
      const int before = via_env == 2 ? 0 : log_lines(ctx, path, files[i].reason);
      if (via_env) ck_assert_int_eq(setenv("FLASHCL_TUNING_DIR", dir, 1), 0);
      if (via_env == 2)
        c = th_context();
      else
        ck_assert_int_eq(fcl_context_set_tuning_dir(c, via_env ? NULL : dir), FCL_SUCCESS);
      alarm(0);
      unsetenv("FLASHCL_TUNING_DIR");
      ck_assert_msg(log_lines(c, path, files[i].reason) > before,
                    "no line for a %s (%s) in the log",
                    files[i].what, via_env ? "FLASHCL_TUNING_DIR" : "setter");
      fcl_tuning_info ti;
      ck_assert_int_eq(fcl_context_tuning(c, &ti), FCL_SUCCESS);
      ck_assert_msg(strstr(ti.source, dir) == NULL, "a %s was loaded", files[i].what);
      if (c != ctx) fcl_context_release(c);
      remove_any(path);
    }
  /* the folder itself one of them (a folder is what it should be) */
  char folder[80];
  snprintf(folder, sizeof folder, "%s/folder", dir);
  for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i)
    for (int via_env = 0; via_env < 2 && files[i].make != make_folder; ++via_env) {
      ck_assert_msg(files[i].make(folder) == 0, "cannot make a %s", files[i].what);
      const char *reason = files[i].make == make_loop ? "symbolic links" : "Not a directory";
      const int before = log_lines(ctx, folder, reason);
      alarm(60);
      if (via_env) ck_assert_int_eq(setenv("FLASHCL_TUNING_DIR", folder, 1), 0);
      ck_assert_int_eq(fcl_context_set_tuning_dir(ctx, via_env ? NULL : folder), FCL_SUCCESS);
      alarm(0);
      unsetenv("FLASHCL_TUNING_DIR");
      ck_assert_msg(log_lines(ctx, folder, reason) > before,
                    "no line for a %s as the folder in the log", files[i].what);
      remove_any(folder);
    }
  rmdir(dir);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tuning");
  TCase *tc = th_tcase("tuning");
  tcase_add_test(tc, bucket_names_round_trip);
  tcase_add_test(tc, buckets_classify_calls);
  tcase_add_test(tc, database_written_and_read_back);
  tcase_add_test(tc, corrupt_databases_are_refused);
  tcase_add_test(tc, shipped_database_notes_other_kernels);
  tcase_add_test(tc, tuned_plan_is_what_runs);
  tcase_add_test(tc, bad_databases_are_skipped_with_a_warning);
  tcase_add_test(tc, hostile_files_are_skipped_promptly);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
