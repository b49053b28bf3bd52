/*
 * test_plan.c — the tile planner on made-up devices: every plan, forward and
 * backward, for every storage type, fits the device's local memory and
 * work-group limit, is internally consistent, and uses the largest tiles
 * that fit; 16-bit storage keeps its tiles in the storage type exactly
 * where that fits a larger tile; a head_dim that cannot fit gets
 * FCL_ERROR_UNSUPPORTED with a reason. Pure: no OpenCL device needed.
 */
#include "harness.h"
#include "problem.h"
#include "plan.h"
#include "rules.h"
#include "families.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static fcl_device_limits made_up(uint64_t local_kib, size_t max_wg, int ptx) {
  fcl_device_limits l;
  memset(&l, 0, sizeof l);
  l.local_mem_bytes = local_kib * 1024;
  l.max_work_group_size = max_wg;
  l.compute_units = 64;
  l.global_mem_bytes = 8ull << 30;
  l.max_alloc_bytes = 2ull << 30;
  l.is_gpu = 1;
  l.nvidia_ptx = ptx;
  l.shuffle = ptx ? FCL_SHUFFLE_NVIDIA_PTX : FCL_SHUFFLE_NONE;
  return l;
}

/* Local bytes of the same tiles with `elem`-byte elements. */
static size_t fwd_bytes_as(const fcl_plan *plan, unsigned elem, const fcl_device_limits *lim) {
  fcl_plan other = *plan;
  other.tile_elem_size = elem;
  return fcl__flash_local_bytes(&other, lim);
}

/* The SIMT backward's local bytes for a plan, in tiles of `elem` bytes. */
static size_t bwd_bytes_as(const fcl_plan *plan, unsigned elem, const fcl_device_limits *lim) {
  fcl_plan other = *plan;
  if (elem) other.tile_elem_size = elem;
  return fcl__flash_bwd_local_bytes(&other, lim);
}

/* Either MMA kernel's local bytes for a plan of `desc`. */
static size_t mma_local_bytes(fcl_pass pass, const fcl_plan *plan, int emulate,
                              const fcl_attention_desc *desc) {
  return pass == FCL_PASS_FORWARD
             ? fcl__flash_mma_local_bytes(plan, emulate)
             : fcl__flash_bwd_mma_local_bytes(plan, emulate, fcl__row_keys_in_local(desc));
}

static const fcl_dtype all_dtypes[3] = {FCL_DTYPE_F32, FCL_DTYPE_F16, FCL_DTYPE_BF16};

/* A CPU device: the CPU kernels where the rule takes them (plan_cpu.c), SIMT
 * where it does not, hints that it cannot honour refused with a reason. */
START_TEST(cpu_devices_plan_the_cpu_kernels) {
  fcl_device_limits lim = made_up(1024, 4096, 0);
  lim.is_gpu = 0;
  lim.compute_units = 2;
  fcl_attention_desc desc;
  fcl_plan plan;
  char why[256];
  const size_t dims[] = {24, 64, 72, 128, 256};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
    fcl_attention_desc_init(&desc, 2, 4, 4, 512, 512, dims[i]);
    ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why),
                     FCL_SUCCESS);
    ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_CPU);
    ck_assert(plan.wg_size == 1 && plan.threads_per_row == 1 && plan.block_k == 16);
    ck_assert_uint_eq(plan.block_q, dims[i] <= 128 ? 64 : 32);
    ck_assert_uint_eq(plan.block_q, 16 * plan.rows_per_thread);
    ck_assert(plan.head_dim_padded % 16 == 0 && plan.head_dim_padded - dims[i] < 16);
    ck_assert_uint_eq(plan.local_bytes, 0);
    ck_assert_uint_eq(plan.splits, 1);
    /* the backward: keys (dK/dV) or queries (dQ) kept and tile rows alike */
    ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &plan, why, sizeof why),
                     FCL_SUCCESS);
    ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_CPU);
    ck_assert(plan.wg_size == 1 && plan.block_q == plan.block_k);
    ck_assert_uint_eq(plan.block_k, dims[i] <= 128 ? 32 : 16);
    ck_assert_uint_eq(plan.local_bytes, 0);
  }
  /* no more rows than the sequence has; halved to give each core two */
  fcl_attention_desc_init(&desc, 1, 1, 1, 40, 512, 64);
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 0), FCL_SUCCESS);
  ck_assert_uint_eq(plan.block_q, 16);
  fcl_attention_desc_init(&desc, 1, 1, 1, 64, 512, 64);
  lim.compute_units = 1;
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 0), FCL_SUCCESS);
  ck_assert_uint_eq(plan.block_q, 32);
  lim.compute_units = 2;
  /* decode (a few rows, packed heads): the CPU kernel too, its four
   * packed rows in one chunk; a simt hint, SIMT */
  fcl_attention_desc_init(&desc, 1, 8, 2, 1, 4096, 128);
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 0), FCL_SUCCESS);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_CPU);
  ck_assert_uint_eq(plan.packed_heads, 4);
  ck_assert_uint_eq(plan.block_q, 16);
  fcl_attention_desc_init(&desc, 1, 8, 2, 512, 512, 256);
  const fcl_plan simt = {.kernel = FCL_FLASH_KERNEL_SIMT};
  for (int pass = 0; pass < 2; ++pass) {
    ck_assert_int_eq(fcl_plan_flash_hinted(&lim, &desc, (fcl_pass)pass, &simt, &plan, NULL, 0),
                     FCL_SUCCESS);
    ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_SIMT);
  }
  /* hints: chunks of 16 rows; what the kernel cannot take, refused */
  fcl_attention_desc_init(&desc, 2, 4, 4, 512, 512, 64);
  const fcl_plan three = {.kernel = FCL_FLASH_KERNEL_CPU, .rows_per_thread = 3};
  ck_assert_int_eq(fcl_plan_flash_hinted(&lim, &desc, FCL_PASS_FORWARD, &three, &plan, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.block_q, 48);
  const fcl_plan refused[] = {{.kernel = FCL_FLASH_KERNEL_CPU, .wg_size = 64},
                              {.kernel = FCL_FLASH_KERNEL_CPU, .threads_per_row = 2},
                              {.kernel = FCL_FLASH_KERNEL_CPU, .block_k = 32},
                              {.kernel = FCL_FLASH_KERNEL_CPU, .tile_elem_size = 2}};
  desc.dtype = FCL_DTYPE_F16;
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i) {
    why[0] = '\0';
    ck_assert_int_eq(
        fcl_plan_flash_hinted(&lim, &desc, FCL_PASS_FORWARD, &refused[i], &plan, why, sizeof why),
        FCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(why, "CPU kernel"), "%s", why);
  }
  const fcl_plan cpu = {.kernel = FCL_FLASH_KERNEL_CPU};
  ck_assert_int_eq(fcl_plan_flash_hinted(&lim, &desc, FCL_PASS_BACKWARD, &three, &plan, why,
                                         sizeof why),
                   FCL_SUCCESS);
  ck_assert(plan.kernel == FCL_FLASH_KERNEL_CPU && plan.block_q == 48 && plan.block_k == 48);
  /* a GPU runs it when asked */
  fcl_device_limits gpu = made_up(48, 1024, 1);
  ck_assert_int_eq(fcl_plan_flash_hinted(&gpu, &desc, FCL_PASS_FORWARD, &cpu, &plan, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_CPU);
  ck_assert_str_eq(fcl_flash_kernel_name(FCL_FLASH_KERNEL_CPU), "cpu");
}
END_TEST

START_TEST(plans_fit_every_made_up_device) {
  const uint64_t locals[] = {16, 32, 48, 64, 512};
  const size_t wgs[] = {256, 1024};
  const size_t seqlens[] = {1, 100, 4096};
  size_t plans = 0, half_tiles = 0;
  for (size_t li = 0; li < 5; ++li)
    for (size_t wi = 0; wi < 2; ++wi)
      for (int ptx = 0; ptx < 2; ++ptx)
        for (size_t d = 1; d <= FCL_MAX_TILED_HEAD_DIM; ++d)
          for (size_t si = 0; si < 3; ++si)
          for (size_t ti = 0; ti < 3; ++ti) {
            fcl_device_limits lim = made_up(locals[li], wgs[wi], ptx);
            fcl_attention_desc desc;
            fcl_attention_desc_init(&desc, 1, 8, 8, seqlens[si], seqlens[si], d);
            desc.causal = (int)(d & 1);
            desc.dtype = all_dtypes[ti];
            const unsigned budget = (unsigned)lim.local_mem_bytes - 1024;
            fcl_plan plan;
            char why[200] = "";
            fcl_status st = fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why);
            ck_assert_msg(st == FCL_SUCCESS, "local %llu KiB, wg %zu, d %zu: %s",
                          (unsigned long long)locals[li], wgs[wi], d, why);
            ++plans;
            ck_assert_uint_le(plan.local_bytes, lim.local_mem_bytes - 1024);
            ck_assert_uint_le(plan.wg_size, lim.max_work_group_size);
            ck_assert_uint_ge(plan.head_dim_padded, d);
            if (plan.kernel >= FCL_FLASH_KERNEL_DECODE) {  /* a GPU, one row: test_decode.c */
              ck_assert(lim.is_gpu && seqlens[si] == 1 && d % 4 == 0);
              ck_assert(plan.kernel == FCL_FLASH_KERNEL_DECODE ||
                        (ptx && d <= 128 && desc.dtype != FCL_DTYPE_F32));
              ck_assert_uint_eq(plan.local_bytes, fcl__flash_decode_local_bytes(&plan, &lim));
              continue;
            }
            ck_assert_uint_eq(plan.block_q,
                              plan.wg_size / plan.threads_per_row * plan.rows_per_thread);
            ck_assert_uint_eq(plan.wg_size % plan.threads_per_row, 0);
            ck_assert_uint_eq(plan.local_bytes, fcl__flash_local_bytes(&plan, &lim));
            /* private floats per work-item for q and the accumulator */
            ck_assert_uint_le(plan.rows_per_thread * 2 * plan.head_dim_padded /
                                  plan.threads_per_row, 128);
            /* the key tile is the largest power of two <= 64 that fits both
             * local memory and 160 private floats per work-item */
            const unsigned slice = plan.head_dim_padded / plan.threads_per_row;
            const unsigned rows = plan.rows_per_thread;
            ck_assert_uint_le(plan.block_k, 64);
            if (plan.wg_size >= 4 * plan.threads_per_row)
              ck_assert_uint_le(rows * (2 * slice + plan.block_k), 160);
            if (plan.block_k < 64) {
              fcl_plan bigger = plan;
              bigger.block_k *= 2;
              ck_assert(fcl__flash_local_bytes(&bigger, &lim) > budget ||
                        rows * (2 * slice + bigger.block_k) > 160);
              /* nor in the storage type, for 16-bit storage */
              if (fcl_dtype_size(desc.dtype) == 2)
                ck_assert(fwd_bytes_as(&bigger, 2, &lim) > budget ||
                          rows * (2 * slice + bigger.block_k) > 160);
            }
            /* tiles hold floats unless the storage type fits a larger tile */
            ck_assert(plan.tile_elem_size == 4 ||
                      (plan.tile_elem_size == 2 && fcl_dtype_size(desc.dtype) == 2));
            if (plan.tile_elem_size == 2) {
              ++half_tiles;
              ck_assert(fwd_bytes_as(&plan, 4, &lim) >
                        budget);
            }
          }
  printf("plan: %zu plans checked, %zu with tiles in the storage type\n", plans, half_tiles);
  ck_assert_uint_gt(half_tiles, 0);
}
END_TEST

START_TEST(work_group_shrinks_to_fill_the_device) {
  fcl_device_limits lim = made_up(48, 1024, 1);
  fcl_attention_desc small, large;
  fcl_attention_desc_init(&small, 1, 1, 1, 64, 64, 64);
  fcl_attention_desc_init(&large, 8, 16, 16, 4096, 4096, 64);
  fcl_plan ps, pl;
  ck_assert_int_eq(fcl_plan_flash(&lim, &small, FCL_PASS_FORWARD, &ps, NULL, 0), FCL_SUCCESS);
  ck_assert_int_eq(fcl_plan_flash(&lim, &large, FCL_PASS_FORWARD, &pl, NULL, 0), FCL_SUCCESS);
  ck_assert_uint_lt(ps.wg_size, pl.wg_size);
  ck_assert_uint_ge(ps.wg_size, 32);
}
END_TEST

START_TEST(a_device_too_small_is_unsupported_with_a_reason) {
  fcl_device_limits lim = made_up(8, 256, 0);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 1, 1, 128, 128, 256);
  fcl_plan plan;
  char why[200] = "";
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(why, "head_dim 256") && strstr(why, "local memory"), "%s", why);
  /* The same head_dim fits a device with more local memory. */
  lim = made_up(16, 256, 0);
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_SUCCESS);
  /* Arguments */
  ck_assert_int_eq(fcl_plan_flash(NULL, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  desc.head_dim = FCL_MAX_HEAD_DIM + 1;
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  lim.max_work_group_size = 0;
  desc.head_dim = 64;
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_ERROR_UNSUPPORTED);
}
END_TEST

START_TEST(small_work_group_limits_are_respected) {
  const size_t limits[] = {1, 2, 16, 48, 100};
  for (size_t i = 0; i < 5; ++i) {
    fcl_device_limits lim = made_up(32, limits[i], 0);
    for (size_t d = 8; d <= 256; d += 8) {
      fcl_attention_desc desc;
      fcl_attention_desc_init(&desc, 1, 1, 1, 300, 300, d);
      fcl_plan plan;
      ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 0),
                       FCL_SUCCESS);
      ck_assert_uint_le(plan.wg_size, limits[i]);
      ck_assert_uint_le(plan.threads_per_row, plan.wg_size);
    }
  }
}
END_TEST

static unsigned bwd_slice(const fcl_plan *plan) {
  return (plan->head_dim_padded / plan->threads_per_row + 3) / 4 * 4;
}

START_TEST(backward_plans_fit_every_made_up_device) {
  const uint64_t locals[] = {16, 32, 48, 64, 512};
  const size_t wgs[] = {256, 1024};
  const size_t seqlens[] = {1, 100, 4096};
  size_t plans = 0, half_tiles = 0;
  for (size_t li = 0; li < 5; ++li)
    for (size_t wi = 0; wi < 2; ++wi)
      for (int ptx = 0; ptx < 2; ++ptx)
        for (size_t d = 1; d <= FCL_MAX_TILED_HEAD_DIM; ++d)
          for (size_t si = 0; si < 3; ++si)
          for (size_t ti = 0; ti < 3; ++ti) {
            fcl_device_limits lim = made_up(locals[li], wgs[wi], ptx);
            fcl_attention_desc desc;
            /* GQA for some: the device is filled by the dK/dV work-groups */
            fcl_attention_desc_init(&desc, 1, 8, d & 2 ? 2 : 8, seqlens[si], seqlens[si], d);
            desc.causal = (int)(d & 1);
            desc.dtype = all_dtypes[ti];
            const unsigned budget = (unsigned)lim.local_mem_bytes - 1024;
            fcl_plan plan;
            char why[200] = "";
            fcl_status st = fcl_plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &plan, why, sizeof why);
            ck_assert_msg(st == FCL_SUCCESS, "local %llu KiB, wg %zu, d %zu: %s",
                          (unsigned long long)locals[li], wgs[wi], d, why);
            ++plans;
            ck_assert_uint_le(plan.local_bytes, lim.local_mem_bytes - 1024);
            ck_assert_uint_eq(plan.local_bytes, bwd_bytes_as(&plan, 0, &lim));
            ck_assert_uint_le(plan.wg_size, lim.max_work_group_size);
            ck_assert_uint_ge(plan.head_dim_padded, d);
            ck_assert_uint_ge(bwd_slice(&plan) * plan.threads_per_row, plan.head_dim_padded);
            ck_assert_uint_eq(plan.wg_size % plan.threads_per_row, 0);
            ck_assert_uint_eq(plan.block_q, plan.block_k);
            ck_assert_uint_eq(plan.block_q,
                              plan.wg_size / plan.threads_per_row * plan.rows_per_thread);
            ck_assert_uint_eq(plan.block_k % fcl__flash_bwd_sub_rows(&plan, &lim), 0);
            ck_assert(plan.threads_per_row == 1 || plan.threads_per_row == 2 ||
                      plan.threads_per_row == 4 || plan.threads_per_row == 8);
            /* k, v, dK and dV slices: at most 128 private floats */
            ck_assert_uint_le(4 * plan.rows_per_thread * bwd_slice(&plan), 128);
            /* and no more work-items per row than that needs */
            if (plan.threads_per_row > 1) {
              fcl_plan fewer = plan;
              fewer.threads_per_row /= 2;
              ck_assert_uint_gt(4 * plan.rows_per_thread * bwd_slice(&fewer), 128);
            }
            /* two rows per work-item where shuffles sum the slices */
            ck_assert_uint_eq(plan.rows_per_thread,
                              ptx && plan.head_dim_padded <= 128 ? 2 : 1);
            /* Where filling the device does not call for smaller groups,
             * the work-group is the largest that fits. */
            fcl_plan bigger = plan;
            bigger.wg_size *= 2;
            bigger.block_q = bigger.block_k =
                bigger.wg_size / bigger.threads_per_row * bigger.rows_per_thread;
            size_t groups = desc.heads_kv * ((desc.seqlen_k + bigger.block_k - 1) / bigger.block_k);
            if (plan.wg_size < 128 && groups >= 2 * lim.compute_units) {
              ck_assert(bigger.wg_size > lim.max_work_group_size ||
                        bwd_bytes_as(&bigger, 0, &lim) > budget);
              if (fcl_dtype_size(desc.dtype) == 2)
                ck_assert(bigger.wg_size > lim.max_work_group_size ||
                          bwd_bytes_as(&bigger, 2, &lim) > budget);
            }
            /* tiles hold floats unless the storage type fits larger tiles */
            ck_assert(plan.tile_elem_size == 4 ||
                      (plan.tile_elem_size == 2 && fcl_dtype_size(desc.dtype) == 2));
            if (plan.tile_elem_size == 2) {
              ++half_tiles;
              ck_assert(bwd_bytes_as(&plan, 4, &lim) > budget);
            }
          }
  printf("plan: %zu backward plans checked, %zu with tiles in the storage type\n", plans,
         half_tiles);
  ck_assert_uint_gt(half_tiles, 0);
}
END_TEST

/* The forward tilings measured fastest on an H200 through NVIDIA's OpenCL
 * (flashcl-bench --tiling at N = 4096, docs/performance.md), pinned so that
 * a change to the rule is a conscious one. */
/* The SIMT plan on the H200 (made_up leaves nvidia_sm 0: no MMA). */
START_TEST(forward_plan_on_the_h200) {
  fcl_device_limits lim = made_up(48, 1024, 1);
  lim.compute_units = 132;
  const struct {
    size_t d;
    unsigned block_k, wg, per_row, rows;
  } best[] = {{64, 16, 128, 2, 2}, {128, 32, 256, 2, 1}};
  /* Registers cap the key tile there, so 16-bit storage changes nothing:
   * its tiles stay floats (converted once, not at every read). */
  for (size_t i = 0; i < 2; ++i)
    for (int causal = 0; causal < 2; ++causal)
      for (size_t t = 0; t < 3; ++t) {
        fcl_attention_desc desc;
        fcl_attention_desc_init(&desc, 4, 2048 / best[i].d, 2048 / best[i].d, 4096, 4096,
                                best[i].d);
        desc.causal = causal;
        desc.dtype = all_dtypes[t];
        fcl_plan plan;
        ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 0),
                         FCL_SUCCESS);
        ck_assert_uint_eq(plan.block_k, best[i].block_k);
        ck_assert_uint_eq(plan.wg_size, best[i].wg);
        ck_assert_uint_eq(plan.threads_per_row, best[i].per_row);
        ck_assert_uint_eq(plan.rows_per_thread, best[i].rows);
        ck_assert_uint_eq(plan.block_q, 128);
        ck_assert_uint_eq(plan.tile_elem_size, 4);
      }
}
END_TEST

/* With its compute capability the H200 takes the MMA kernel wherever it
 * fits and pays: 16-bit types up to d = 128, f32 from d = 64 to 128; Bc 64,
 * except f32 above d = 64 (registers); 8 warps. Not for head_dim 256 or
 * one that is not a multiple of 8, nor below sm_80, nor when a hint
 * describes a SIMT tiling. */
START_TEST(forward_plan_on_the_h200_takes_the_tensor_cores) {
  fcl_device_limits lim = made_up(48, 1024, 1);
  lim.compute_units = 132;
  lim.nvidia_sm = 90;
  for (int causal = 0; causal < 2; ++causal)
    for (size_t t = 0; t < 3; ++t)
      for (size_t d = 16; d <= 256; d += 8) {
        fcl_attention_desc desc;
        fcl_attention_desc_init(&desc, 4, 16, 16, 4096, 4096, d);
        desc.dtype = all_dtypes[t];
        desc.causal = causal;
        fcl_plan plan;
        ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 0),
                         FCL_SUCCESS);
        if (d > 128 || (t == 0 && d < 64)) {  /* f32 below 64: unmeasured */
          ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_SIMT);
          continue;
        }
        /* 16-bit causal up to 64: 4 warps over 128 keys; else 8 over 64 (f32
         * past 64: 32) */
        const int causal_short = causal && t > 0 && d <= 64;
        ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_MMA);
        ck_assert_uint_eq(plan.wg_size, causal_short ? 128 : 256);
        ck_assert_uint_eq(plan.block_q, causal_short ? 64 : 128);
        ck_assert_uint_eq(plan.block_k, causal_short ? 128 : t == 0 && d > 64 ? 32 : 64);
        ck_assert_uint_eq(plan.head_dim_padded, (d + 15) / 16 * 16);
        ck_assert_uint_eq(plan.tile_elem_size, fcl_dtype_size(desc.dtype));
        ck_assert_uint_le(plan.local_bytes, lim.local_mem_bytes - 1024);
        ck_assert_uint_eq(plan.local_bytes, fcl__flash_mma_local_bytes(&plan, 0));
      }
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 4, 16, 16, 4096, 4096, 60);
  desc.dtype = FCL_DTYPE_F16;
  fcl_plan plan;
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 0), FCL_SUCCESS);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_SIMT);
  desc.head_dim = 64;
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 0), FCL_SUCCESS);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_MMA);
  const fcl_plan simt_hint = {.threads_per_row = 2};
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_FORWARD, &simt_hint, &plan, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_SIMT);
  /* the backward: MMA where the forward is, SIMT when a SIMT field is
   * hinted; warp pairs that split head_dim in f32 beyond 64 */
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &simt_hint, &plan, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_SIMT);
  for (size_t t = 0; t < 3; ++t)
    for (size_t d = 16; d <= 128; d += 8) {
      desc.dtype = all_dtypes[t];
      desc.head_dim = d;
      ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &plan, NULL, 0),
                       FCL_SUCCESS);
      if (t == 0 && d < 64) {
        ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_SIMT);
        continue;
      }
      const unsigned padded = (unsigned)(d + 15) / 16 * 16;
      const int pairs = t == 0 && padded > 64 && padded % 32 == 0;
      ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_MMA);
      ck_assert_uint_eq(plan.threads_per_row, pairs ? 8 : 4);
      /* blocks of 64 rows, or of 32 where the f32 tiles do not fit */
      ck_assert_uint_eq(plan.block_k, t == 0 && d > 80 ? 32 : 64);
      ck_assert_uint_eq(plan.block_q, plan.block_k);
      ck_assert_uint_eq(plan.wg_size, plan.block_k * plan.threads_per_row / 2);
      ck_assert_uint_eq(plan.local_bytes, mma_local_bytes(FCL_PASS_BACKWARD, &plan, 0, &desc));
      ck_assert_uint_le(plan.local_bytes, lim.local_mem_bytes - 1024);
    }
  desc.dtype = FCL_DTYPE_F16;
  desc.head_dim = 64;
  lim.nvidia_sm = 75;
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 0), FCL_SUCCESS);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_SIMT);
}
END_TEST

/* The MMA kernels forced on every made-up device (emulated where it has no
 * matrix instructions), forward and backward, and the forward with two
 * 16-row tiles a warp: plans fit, keep the kernels' fixed layout, and a
 * head_dim they do not take or a device too small is unsupported with a
 * reason. */

START_TEST(mma_plans_fit_every_made_up_device) {
  const uint64_t locals[] = {8, 16, 32, 48, 64, 512};
  const size_t wgs[] = {64, 256, 1024};
  const fcl_plan hints[2] = {{.kernel = FCL_FLASH_KERNEL_MMA},
                             {.kernel = FCL_FLASH_KERNEL_MMA, .rows_per_thread = 4}};
  size_t plans = 0;
  for (size_t li = 0; li < 6; ++li)
    for (size_t wi = 0; wi < 3; ++wi)
      for (unsigned sm = 0; sm <= 90; sm += 90)
        for (size_t d = 1; d <= FCL_MAX_TILED_HEAD_DIM; ++d)
          for (size_t t = 0; t < 3; ++t)
            for (unsigned step = 0; step < 3; ++step) {
              /* the forward with one and two row tiles a warp, the backward */
              const fcl_pass pass = step < 2 ? FCL_PASS_FORWARD : FCL_PASS_BACKWARD;
              const unsigned m_tiles = step == 1 ? 2 : 1;
              const fcl_plan hint = hints[m_tiles - 1];
              fcl_device_limits lim = made_up(locals[li], wgs[wi], sm != 0);
              lim.nvidia_sm = sm;
              fcl_attention_desc desc;
              fcl_attention_desc_init(&desc, 1, 8, 8, 1000, 1000, d);
              desc.dtype = all_dtypes[t];
              fcl_plan plan;
              char why[256];
              fcl_status st = fcl__plan_flash(&lim, &desc, pass, &hint, &plan, why, sizeof why);
              if (d % 8 || d > 128) {
                ck_assert_int_eq(st, FCL_ERROR_UNSUPPORTED);
                ck_assert_ptr_nonnull(strstr(why, "multiple of 8"));
                continue;
              }
              if (st != FCL_SUCCESS) {
                ck_assert_int_eq(st, FCL_ERROR_UNSUPPORTED);
                ck_assert_ptr_nonnull(strstr(why, "local memory"));
                /* the smallest work-group: one warp, or one pair (f32
                 * backward beyond 64) */
                plan.head_dim_padded = (d + 15) / 16 * 16;
                plan.threads_per_row = pass == FCL_PASS_BACKWARD && t == 0 &&
                                               plan.head_dim_padded > 64 &&
                                               plan.head_dim_padded % 32 == 0
                                           ? 8
                                           : 4;
                plan.block_k = 16, plan.wg_size = 8 * plan.threads_per_row;
                plan.rows_per_thread = 2 * m_tiles;
                plan.tile_elem_size = (unsigned)fcl_dtype_size(desc.dtype);
                ck_assert_uint_gt(mma_local_bytes(pass, &plan, !sm, &desc),
                                  lim.local_mem_bytes - 1024);
                continue;
              }
              ++plans;
              ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_MMA);
              /* 16 rows per warp, or per warp pair in the backward */
              const unsigned tpr = plan.threads_per_row;
              ck_assert(tpr == 4 || (pass == FCL_PASS_BACKWARD && tpr == 8 &&
                                     plan.head_dim_padded % 32 == 0));
              ck_assert_uint_eq(plan.rows_per_thread, 2 * m_tiles);
              ck_assert_uint_eq(plan.block_q, plan.wg_size * 2 * m_tiles / tpr);
              ck_assert_uint_eq(plan.wg_size % (8 * tpr), 0);
              ck_assert_uint_le(plan.wg_size, lim.max_work_group_size);
              ck_assert_uint_eq(plan.block_k % 16, 0);
              if (pass == FCL_PASS_BACKWARD) ck_assert_uint_eq(plan.block_k, plan.block_q);
              ck_assert_uint_ge(plan.head_dim_padded, d);
              ck_assert_uint_eq(plan.local_bytes, mma_local_bytes(pass, &plan, !sm, &desc));
              ck_assert_uint_le(plan.local_bytes, lim.local_mem_bytes - 1024);
            }
  printf("plan: %zu MMA plans checked\n", plans);
  ck_assert_uint_gt(plans, 0);
  /* a hint that contradicts the kernel's layout */
  fcl_device_limits lim = made_up(48, 1024, 1);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 8, 8, 1000, 1000, 64);
  fcl_plan plan;
  const fcl_plan bad[] = {{.kernel = FCL_FLASH_KERNEL_MMA, .threads_per_row = 2},
                          {.kernel = FCL_FLASH_KERNEL_MMA, .block_k = 24},
                          {.kernel = FCL_FLASH_KERNEL_MMA, .wg_size = 16}};
  for (size_t i = 0; i < 3; ++i)
    ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_FORWARD, &bad[i], &plan, NULL, 0),
                     FCL_ERROR_UNSUPPORTED);
  /* warp pairs: the backward's only, and only where head_dim halves into
   * whole 16-column steps */
  const fcl_plan pairs = {.kernel = FCL_FLASH_KERNEL_MMA, .threads_per_row = 8};
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_FORWARD, &pairs, &plan, NULL, 0),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &pairs, &plan, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.threads_per_row, 8);
  ck_assert_uint_eq(plan.block_q, plan.wg_size / 4);
  desc.head_dim = 48;
  char why[200];
  ck_assert_int_eq(
      fcl__plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &pairs, &plan, why, sizeof why),
      FCL_ERROR_UNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(why, "halves"));
  desc.head_dim = 64;
  /* two 16-row tiles a warp in the forward only, in half the warps; one
   * tile by default; no other count */
  const fcl_plan two_tiles = {.kernel = FCL_FLASH_KERNEL_MMA, .rows_per_thread = 4};
  const fcl_plan three = {.kernel = FCL_FLASH_KERNEL_MMA, .rows_per_thread = 3};
  fcl_plan one;
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_FORWARD, &hints[0], &one, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_uint_eq(one.rows_per_thread, 2);
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_FORWARD, &two_tiles, &plan, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.rows_per_thread, 4);
  ck_assert_uint_eq(plan.wg_size, one.wg_size / 2);
  ck_assert_uint_eq(plan.block_q, one.block_q);
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &two_tiles, &plan, NULL, 0),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_FORWARD, &three, &plan, NULL, 0),
                   FCL_ERROR_UNSUPPORTED);
  /* the backward's tiles are its blocks: a block_k hint sets the
   * work-group, and one that contradicts wg_size is refused */
  desc.dtype = FCL_DTYPE_F16;
  const fcl_plan long_tiles = {.kernel = FCL_FLASH_KERNEL_MMA, .wg_size = 128, .block_k = 128};
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &long_tiles, &plan, NULL, 0),
                   FCL_ERROR_UNSUPPORTED);
  const fcl_plan tiles_32 = {.kernel = FCL_FLASH_KERNEL_MMA, .block_k = 32};
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &tiles_32, &plan, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.wg_size, 64);
  ck_assert_uint_eq(plan.block_k, 32);
  desc.dtype = FCL_DTYPE_F32;
  const fcl_plan three_rows = {.kernel = FCL_FLASH_KERNEL_MMA, .rows_per_thread = 3};
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_FORWARD, &three_rows, &plan, NULL, 0),
                   FCL_ERROR_UNSUPPORTED);
  const fcl_plan not_a_kernel = {.kernel = FCL_FLASH_KERNELS};
  ck_assert_int_eq(fcl__check_tiling_hint_why(&not_a_kernel, NULL, 0),
                   FCL_ERROR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(backward_plan_on_the_h200) {
  /* What an H200 reports: 48 KiB, 1024 work-items, 132 compute units. */
  fcl_device_limits lim = made_up(48, 1024, 1);
  lim.compute_units = 132;
  const size_t dims[] = {64, 128, 256};
  for (size_t i = 0; i < 3; ++i)
    for (size_t t = 0; t < 3; ++t) {
      fcl_attention_desc desc;
      fcl_attention_desc_init(&desc, 16, 16, 16, 2048, 2048, dims[i]);
      desc.dtype = all_dtypes[t];
      fcl_plan plan;
      ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &plan, NULL, 0),
                       FCL_SUCCESS);
      ck_assert_uint_eq(plan.wg_size, 128);
      /* slices of 16 floats, two rows each, up to head_dim 128; then 32 */
      ck_assert_uint_eq(plan.rows_per_thread, dims[i] <= 128 ? 2 : 1);
      ck_assert_uint_eq(plan.threads_per_row, dims[i] <= 128 ? dims[i] / 16 : 8);
      ck_assert_uint_le(plan.local_bytes, 47 * 1024);
      /* 128-work-item tiles fit as floats: no conversion at every read */
      ck_assert_uint_eq(plan.tile_elem_size, 4);
    }
}
END_TEST

START_TEST(backward_device_too_small_is_unsupported_with_a_reason) {
  fcl_device_limits lim = made_up(2, 256, 0);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 1, 1, 128, 128, 256);
  fcl_plan plan;
  char why[200] = "";
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &plan, why, sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(why, "head_dim 256") && strstr(why, "local memory"), "%s", why);
  lim = made_up(8, 256, 0);
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_int_eq(fcl_plan_flash(&lim, &desc, (fcl_pass)5, &plan, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  /* A work-group hint that does not fit is refused, not shrunk. */
  fcl_plan hint = {.wg_size = 256};
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &hint, &plan, why,
                                   sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  /* Eight work-items per row in both passes (AMD's and Intel's wide head
   * dims), as many as a hint may ask for. */
  hint = (fcl_plan){.threads_per_row = 8};
  lim = made_up(48, 256, 0);
  for (int pass = 0; pass < 2; ++pass) {
    ck_assert_int_eq(fcl__plan_flash(&lim, &desc, pass ? FCL_PASS_BACKWARD : FCL_PASS_FORWARD,
                                     &hint, &plan, why, sizeof why),
                     FCL_SUCCESS);
    ck_assert_uint_eq(plan.threads_per_row, 8);
  }
  /* ... where head_dim splits into eight float4 slices (bucket 16 does not) */
  fcl_attention_desc narrow = desc;
  narrow.head_dim = 16;
  ck_assert_int_eq(fcl__plan_flash(&lim, &narrow, FCL_PASS_FORWARD, &hint, &plan, why,
                                   sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(why, "float4"), "%s", why);
}
END_TEST

/* 16 KiB of local memory: floats cap the forward's key tile (and the
 * backward's work-group) below what registers allow; the storage type's
 * 2-byte elements fit twice the rows, and the plan takes them. */
START_TEST(half_storage_takes_larger_tiles_where_local_memory_limits_them) {
  for (int ptx = 0; ptx < 2; ++ptx)
    for (size_t t = 1; t < 3; ++t) {
      fcl_device_limits lim = made_up(16, 1024, ptx);
      fcl_attention_desc desc;
      fcl_attention_desc_init(&desc, 1, 8, 8, 4096, 4096, 128);
      fcl_plan f32, half;
      ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &f32, NULL, 0),
                       FCL_SUCCESS);
      desc.dtype = all_dtypes[t];
      ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &half, NULL, 0),
                       FCL_SUCCESS);
      ck_assert_uint_eq(f32.tile_elem_size, 4);
      ck_assert_uint_eq(half.tile_elem_size, 2);
      ck_assert_uint_eq(half.block_k, 2 * f32.block_k);
      ck_assert_uint_eq(half.wg_size, f32.wg_size);
      ck_assert_uint_le(half.local_bytes, lim.local_mem_bytes - 1024);
      ck_assert_uint_eq(half.local_bytes, fcl__flash_local_bytes(&half, &lim));

      desc.dtype = FCL_DTYPE_F32;
      ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &f32, NULL, 0),
                       FCL_SUCCESS);
      desc.dtype = all_dtypes[t];
      ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &half, NULL, 0),
                       FCL_SUCCESS);
      ck_assert_uint_eq(f32.tile_elem_size, 4);
      ck_assert_uint_eq(half.tile_elem_size, 2);
      ck_assert_uint_eq(half.wg_size, 2 * f32.wg_size);
      ck_assert_uint_eq(half.block_k, 2 * f32.block_k);
      ck_assert_uint_le(half.local_bytes, lim.local_mem_bytes - 1024);
      ck_assert_uint_eq(half.local_bytes, bwd_bytes_as(&half, 0, &lim));
    }
}
END_TEST

/* The tile element size as a tuning hint: forced either way for 16-bit
 * storage, refused with a reason for f32. */
START_TEST(tile_element_hints) {
  fcl_device_limits lim = made_up(48, 1024, 1);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 8, 8, 1024, 1024, 64);
  desc.dtype = FCL_DTYPE_BF16;
  const fcl_pass passes[2] = {FCL_PASS_FORWARD, FCL_PASS_BACKWARD};
  for (int p = 0; p < 2; ++p) {
    fcl_plan plan, hint = {.tile_elem_size = 2};
    char why[200] = "";
    ck_assert_int_eq(fcl__plan_flash(&lim, &desc, passes[p], &hint, &plan, why, sizeof why),
                     FCL_SUCCESS);
    ck_assert_uint_eq(plan.tile_elem_size, 2);
    hint.tile_elem_size = 4;
    ck_assert_int_eq(fcl__plan_flash(&lim, &desc, passes[p], &hint, &plan, why, sizeof why),
                     FCL_SUCCESS);
    ck_assert_uint_eq(plan.tile_elem_size, 4);
    desc.dtype = FCL_DTYPE_F32;
    hint.tile_elem_size = 2;
    ck_assert_int_eq(fcl__plan_flash(&lim, &desc, passes[p], &hint, &plan, why, sizeof why),
                     FCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(why, "2-byte") && strstr(why, "f32"), "%s", why);
    desc.dtype = FCL_DTYPE_BF16;
  }
}
END_TEST

START_TEST(backward_small_work_group_limits_are_respected) {
  const size_t limits[] = {1, 2, 16, 48, 100};
  for (size_t i = 0; i < 5; ++i) {
    fcl_device_limits lim = made_up(32, limits[i], 0);
    for (size_t d = 8; d <= 256; d += 8) {
      fcl_attention_desc desc;
      fcl_attention_desc_init(&desc, 1, 1, 1, 300, 300, d);
      fcl_plan plan;
      ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_BACKWARD, &plan, NULL, 0),
                       FCL_SUCCESS);
      ck_assert_uint_le(plan.wg_size, limits[i]);
      ck_assert_uint_le(plan.threads_per_row, plan.wg_size);
      ck_assert_uint_le(plan.local_bytes, lim.local_mem_bytes - 1024);
      /* the preprocessing kernel's launch: powers of two (its tree sum)
       * within the limit, a float4 per work-item where the group allows */
      const fcl__pre_shape pre = fcl__flash_bwd_pre_shape(&lim, d);
      ck_assert_uint_le(pre.wg_size, limits[i]);
      ck_assert_uint_le(pre.wg_size, 128);
      ck_assert_uint_gt(2 * pre.wg_size, limits[i] < 128 ? limits[i] : 128);
      ck_assert_uint_eq(pre.wg_size & (pre.wg_size - 1), 0);
      ck_assert_uint_eq(pre.threads_per_row & (pre.threads_per_row - 1), 0);
      ck_assert_uint_le(pre.threads_per_row, pre.wg_size);
      const unsigned want = d <= 128 ? (unsigned)(d + 3) / 4 : 32;
      ck_assert(pre.threads_per_row >= want || pre.threads_per_row == pre.wg_size);
      ck_assert(pre.threads_per_row == 1 || 2 * pre.threads_per_row < d);  /* no more */
    }
  }
}
END_TEST

/* A block_k hint below the SIMT forward's smallest tile names that limit,
 * not a local-memory figure (before: "head_dim 32 needs 768 bytes of
 * local memory per work-group; the device allows 2096128"). */
START_TEST(a_block_k_hint_below_the_minimum_names_it) {
  fcl_device_limits lim = made_up(2048, 4096, 0);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 2, 2, 64, 64, 32);
  for (unsigned bk = 1; bk < 4; ++bk) {
    fcl_plan hint = {.block_k = bk}, plan;
    char why[256];
    ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_FORWARD, &hint, &plan, why, sizeof why),
                     FCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(why, "below the SIMT forward's minimum of 4"), "why: %s", why);
  }
  fcl_plan hint = {.block_k = 4}, plan;
  ck_assert_int_eq(fcl__plan_flash(&lim, &desc, FCL_PASS_FORWARD, &hint, &plan, NULL, 0),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.block_k, 4);
}
END_TEST

/* The I/O model's byte counts past 64 bits are INVALID_SHAPE, not wrapped
 * (before: B = N = INT_MAX, d = 1 gave FCL_SUCCESS and 1.8e19 bytes); just
 * inside, they are exact: the flash forward of B x N queries against N
 * keys, d = 1, f32, one query block's worth of keys per block. */
START_TEST(io_model_refuses_counts_past_64_bits) {
  fcl_device_limits lim = made_up(48, 1024, 1);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, INT_MAX, 1, 1, INT_MAX, INT_MAX, 1);
  fcl_io_estimate est;
  memset(&est, 0xa5, sizeof est);
  const fcl_io_estimate untouched = est;
  for (int algo = 0; algo < 2; ++algo)
    for (int pass = 0; pass < 2; ++pass) {
      fcl_status st = fcl_io_model(&lim, &desc, (fcl_algo)algo, (fcl_pass)pass, 1, &est);
      ck_assert_msg(st == FCL_ERROR_INVALID_SHAPE || (algo == FCL_ALGO_NAIVE &&
                                                      st == FCL_ERROR_OUT_OF_MEMORY),
                    "algo %d pass %d: %s", algo, pass, fcl_status_str(st));
      ck_assert_mem_eq(&est, &untouched, sizeof est);
    }
  /* 2^31 - 1 queries and one key per batch of 2^20: fits; O, Q and LSE
   * once, K and V once per query block */
  fcl_attention_desc_init(&desc, 1 << 20, 1, 1, INT_MAX, 1, 1);
  ck_assert_int_eq(fcl_io_model(&lim, &desc, FCL_ALGO_FLASH, FCL_PASS_FORWARD, 1, &est),
                   FCL_SUCCESS);
  const unsigned __int128 rows = (unsigned __int128)(1 << 20) * INT_MAX;
  const unsigned __int128 blocks =
      (unsigned __int128)(1 << 20) * (((uint64_t)INT_MAX + est.plan.block_q - 1) / est.plan.block_q);
  ck_assert(est.bytes_loaded == (uint64_t)(rows * 4 + blocks * 2 * 4));
  ck_assert(est.bytes_stored == (uint64_t)(rows * 4 + rows * 4));
}
END_TEST

/* Every profile is a GPU the planner plans for: every head_dim, storage
 * type and pass fits its local memory and work-group limit, and its
 * programs list the plan's local bytes and work-group size. */
START_TEST(every_profile_plans_every_pass) {
  size_t n = 0;
  const fcl_device_profile *profiles = fcl_device_profiles(&n);
  ck_assert_uint_ge(n, 4);
  for (size_t i = 0; i < n; ++i) {
    const fcl_device_limits *lim = &profiles[i].info.limits;
    ck_assert_msg(profiles[i].key && profiles[i].compiler && profiles[i].source, "profile %zu", i);
    ck_assert(lim->is_gpu && lim->vendor != FCL_VENDOR_OTHER && lim->sub_group_size > 0);
    for (size_t d = 8; d <= FCL_MAX_TILED_HEAD_DIM; d += 8)
      for (size_t ti = 0; ti < 3; ++ti)
        for (int pass = FCL_PASS_FORWARD; pass <= FCL_PASS_BACKWARD; ++pass) {
          fcl_attention_desc desc;
          fcl_attention_desc_init(&desc, 4, 16, 16, 2048, 2048, d);
          desc.dtype = all_dtypes[ti];
          desc.causal = (int)(d / 8 & 1);
          fcl_plan plan;
          char why[200] = "";
          ck_assert_msg(fcl_plan_flash(lim, &desc, (fcl_pass)pass, &plan, why, sizeof why) ==
                            FCL_SUCCESS, "%s d %zu: %s", profiles[i].key, d, why);
          ck_assert_uint_le(plan.local_bytes, lim->local_mem_bytes);
          ck_assert_uint_le(plan.wg_size, lim->max_work_group_size);
          fcl_program_info programs[FCL_MAX_PASS_PROGRAMS];
          unsigned count = 0;
          ck_assert_int_eq(fcl_flash_programs(lim, &desc, (fcl_pass)pass, programs, &count, why,
                                              sizeof why), FCL_SUCCESS);
          const fcl_program_info *main = &programs[count - 1];
          ck_assert_uint_eq(main->local_bytes, plan.local_bytes);
          ck_assert_uint_eq(main->wg_size, plan.wg_size);
          ck_assert_ptr_nonnull(strstr(main->options, "-cl-std=CL1.2"));
        }
  }
}
END_TEST

/* A paged cache: wherever the contiguous problem plans, every page size
 * that is a multiple of FCL_PAGE_SIZE_MULTIPLE plans too, for every
 * forward kernel, with each page lookup's keys (a row's, or a run of 16)
 * within a page; and the paged plan is the contiguous one, whose tiles may
 * span pages. On NVIDIA's H200 rules, an H200 without PTX, a CPU, and
 * every profile. */
static void check_paged_plans(const fcl_device_limits *lim, const char *name) {
  const size_t pages[] = {16, 32, 48, 64, 80, 128, 256, 4096};
  const size_t dims[] = {32, 64, 128};
  const size_t rows[] = {1, 4, 40};
  const unsigned kernels[] = {FCL_FLASH_KERNEL_AUTO,   FCL_FLASH_KERNEL_SIMT,
                              FCL_FLASH_KERNEL_MMA,    FCL_FLASH_KERNEL_DECODE,
                              FCL_FLASH_KERNEL_DECODE_MMA, FCL_FLASH_KERNEL_CPU};
  unsigned planned = 0;
  for (size_t k = 0; k < sizeof kernels / sizeof *kernels; ++k)
    for (size_t t = 0; t < 3; ++t)
      for (size_t di = 0; di < sizeof dims / sizeof *dims; ++di)
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ++ri)
          for (int causal = 0; causal < 2; ++causal) {
            fcl_attention_desc desc;
            fcl_attention_desc_init(&desc, 2, 8, 2, rows[ri], 4096, dims[di]);
            desc.dtype = all_dtypes[t];
            desc.causal = causal;
            const fcl_plan hint = {.kernel = kernels[k]};
            fcl_plan flat, paged;
            if (fcl_plan_flash_hinted(lim, &desc, FCL_PASS_FORWARD, &hint, &flat, NULL, 0) !=
                FCL_SUCCESS)
              continue;
            for (size_t pi = 0; pi < sizeof pages / sizeof *pages; ++pi) {
              desc.block_table = (cl_mem)&desc;  /* planned, never read */
              desc.page_size = pages[pi];
              desc.pages_per_seq = (desc.seqlen_k + pages[pi] - 1) / pages[pi];
              desc.num_pages = desc.batch * desc.pages_per_seq;
              char why[256] = "";
              ck_assert_msg(fcl_plan_flash_hinted(lim, &desc, FCL_PASS_FORWARD, &hint, &paged,
                                                  why, sizeof why) == FCL_SUCCESS,
                            "%s, %s kernel, %s d %zu, %zu rows, causal %d, pages of %zu: %s",
                            name, fcl_flash_kernel_name(kernels[k]), fcl_dtype_name(desc.dtype),
                            dims[di], rows[ri], causal, pages[pi], why);
              const unsigned step = fcl__page_lookup_keys(&paged);
              ck_assert_msg(pages[pi] % step == 0, "%s: %u keys a lookup, pages of %zu", name,
                            step, pages[pi]);
              ck_assert_msg(paged.kernel == flat.kernel && paged.block_k == flat.block_k &&
                                paged.wg_size == flat.wg_size && paged.splits == flat.splits,
                            "%s, %s d %zu, %zu rows, pages of %zu: block_k %u wg %u, "
                            "unpaged %u, %u",
                            name, fcl_dtype_name(desc.dtype), dims[di], rows[ri], pages[pi],
                            paged.block_k, paged.wg_size, flat.block_k, flat.wg_size);
              ++planned;
            }
            desc.block_table = NULL;
            desc.page_size = desc.pages_per_seq = desc.num_pages = 0;
          }
  ck_assert_uint_gt(planned, 0);
}

START_TEST(paged_plans_are_the_unpaged_ones) {
  fcl_device_limits h200 = made_up(48, 1024, 1);
  h200.compute_units = 132;
  h200.nvidia_sm = 90;
  check_paged_plans(&h200, "H200 rules");
  const fcl_device_limits simt = made_up(48, 1024, 0);
  check_paged_plans(&simt, "a GPU without PTX");
  fcl_device_limits cpu = made_up(256, 4096, 0);
  cpu.is_gpu = 0;
  check_paged_plans(&cpu, "a CPU");
  size_t n = 0;
  const fcl_device_profile *profiles = fcl_device_profiles(&n);
  for (size_t i = 0; i < n; ++i) check_paged_plans(&profiles[i].info.limits, profiles[i].key);
}
END_TEST

/* The decode kernel's products (fcl_plan.decode_untransposed): on 132
 * multiprocessors an unsplit 16-bit decode of B x 8 KV heads runs B x 8
 * blocks in waves of 396 transposed; the untransposed kernel where the
 * last would be under half full (B 64: 512 blocks, 116 in the last), the
 * transposed one where it is full enough (B 96: 372; B 128: 232), where
 * one wave holds them all (B 32) and where the call is split (B 8), for
 * a quantized cache, and where the instructions are emulated. The
 * program then takes DECODE_T=0, and only then. */
static unsigned untransposed(const fcl_device_limits *lim, size_t batch, fcl_kv_dtype kv,
                             fcl__options *opts) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, batch, 32, 8, 1, 8192, 128);
  desc.dtype = FCL_DTYPE_F16;
  desc.causal = 1;
  desc.kv_dtype = kv;
  fcl_plan plan;
  char why[200] = "";
  ck_assert_msg(fcl_plan_flash(lim, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why) ==
                    FCL_SUCCESS, "%s", why);
  fcl__options_init(opts);
  const fcl__family_pass *fp = fcl__family_pass_of(plan.kernel, FCL_PASS_FORWARD);
  fcl__shape shape;
  ck_assert_int_eq(fcl__check_desc_why(&desc, &shape, why, sizeof why), FCL_SUCCESS);
  fcl__family_options(fp, lim, &shape, &plan, opts);
  ck_assert(plan.decode_untransposed == 0 || plan.kernel == FCL_FLASH_KERNEL_DECODE_MMA);
  return plan.decode_untransposed;
}

START_TEST(decode_takes_the_products_whose_waves_fill_the_device) {
  fcl_device_limits h100 = made_up(48, 1024, 1);
  h100.compute_units = 132;
  h100.nvidia_sm = 90;
  fcl__options opts;
  ck_assert_uint_eq(untransposed(&h100, 64, FCL_KV_AS_DTYPE, &opts), 1);
  ck_assert_msg(strstr(opts.text, "-DDECODE_T=0"), "%s", opts.text);
  const size_t transposed[] = {8, 32, 96, 128};
  for (size_t i = 0; i < 4; ++i) {
    ck_assert_uint_eq(untransposed(&h100, transposed[i], FCL_KV_AS_DTYPE, &opts), 0);
    ck_assert_msg(!strstr(opts.text, "DECODE_T"), "%s", opts.text);
  }
  ck_assert_uint_eq(untransposed(&h100, 64, FCL_KV_Q8_0, &opts), 0);
  h100.compute_units = 100;  /* 512 blocks: 212 in the last wave of 300 */
  ck_assert_uint_eq(untransposed(&h100, 64, FCL_KV_AS_DTYPE, &opts), 0);
  const fcl_device_limits emulated = made_up(48, 1024, 0);
  ck_assert_uint_eq(untransposed(&emulated, 64, FCL_KV_AS_DTYPE, &opts), 0);
}
END_TEST

/* The CPU forward's blocks of few rows (a decode's packed heads, at most
 * FCL_CPU_FEW_ROWS) take their scores a row at a time (CPU_FEW_ROWS); a
 * call with more rows a block, the batch-invariant mode (whose decode row
 * is a chunk's bit for bit) and other families do not. */
START_TEST(cpu_forward_takes_few_rows_where_blocks_have_them) {
  fcl_device_limits lim = made_up(1024, 4096, 0);
  lim.is_gpu = 0;
  lim.compute_units = 2;
  static const struct {
    size_t heads_q, seqlen_q;
    int invariant;
    unsigned want;
  } cases[] = {{8, 1, 0, FCL_CPU_FEW_ROWS},  {16, 1, 0, FCL_CPU_FEW_ROWS}, {32, 1, 0, 0},
               {8, 2, 0, FCL_CPU_FEW_ROWS},  {8, 3, 0, 0},                 {8, 1, 1, 0},
               {2, 512, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    fcl_attention_desc desc;
    fcl_attention_desc_init(&desc, 2, cases[i].heads_q, 2, cases[i].seqlen_q, 4096, 128);
    desc.batch_invariant = cases[i].invariant;
    fcl_plan plan;
    ck_assert_int_eq(fcl_plan_flash(&lim, &desc, FCL_PASS_FORWARD, &plan, NULL, 0), FCL_SUCCESS);
    ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_CPU);
    ck_assert_msg(fcl__cpu_few_rows(&desc, &plan) == cases[i].want, "case %zu: %u", i,
                  fcl__cpu_few_rows(&desc, &plan));
  }
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 8, 2, 1, 4096, 128);
  const fcl_device_limits gpu = made_up(48, 1024, 0);
  fcl_plan plan;
  ck_assert_int_eq(fcl_plan_flash(&gpu, &desc, FCL_PASS_FORWARD, &plan, NULL, 0), FCL_SUCCESS);
  ck_assert_uint_ne(plan.kernel, FCL_FLASH_KERNEL_CPU);
  ck_assert_uint_eq(fcl__cpu_few_rows(&desc, &plan), 0);
}
END_TEST

/* The decode-mma family's options beyond the tiling: the (576, 512) decode
 * on the wide kernel holds ptxas to 128 registers a lane (MMA_REG_CAP,
 * -cl-nv-maxrregcount, no required size); an int4 cache under f16 queries
 * takes K scaled after the products (DECODE_K_SCALE_AFTER=2) held to 168,
 * and int8 on rows of 128 columns; fp8, an f16 cache and bf16 take
 * neither; off NVIDIA's compiler no cap, the int4 form kept (one kernel
 * text wherever a plan runs it). K's view offset by
 * `k_offset` bytes, its buffer's lent memory at a `buffer_unit` boundary
 * (0: the device's). */
static void decode_mma_options_at(const fcl_device_limits *lim, size_t d, size_t d_v,
                                  fcl_dtype dtype, fcl_kv_dtype kv, size_t k_offset,
                                  unsigned buffer_unit, fcl__options *opts) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 8, d_v > 128 ? 128 : 32, d_v > 128 ? 1 : 8, 1, 8192, d);
  desc.head_dim_v = d_v;
  desc.dtype = dtype;
  desc.causal = 1;
  desc.kv_dtype = kv;
  desc.k.offset = k_offset;
  const fcl_plan hint = {.kernel = FCL_FLASH_KERNEL_DECODE_MMA};
  fcl_plan plan;
  char why[200] = "";
  ck_assert_msg(fcl_plan_flash_hinted(lim, &desc, FCL_PASS_FORWARD, &hint, &plan, why,
                                      sizeof why) == FCL_SUCCESS,
                "%s", why);
  fcl__shape shape;
  ck_assert_int_eq(fcl__check_desc_why(&desc, &shape, why, sizeof why), FCL_SUCCESS);
  shape.kv_buffer_unit = buffer_unit;
  fcl__options_init(opts);
  fcl__family_options(fcl__family_pass_of(plan.kernel, FCL_PASS_FORWARD), lim, &shape, &plan,
                      opts);
}

static void decode_mma_options(const fcl_device_limits *lim, size_t d, size_t d_v,
                               fcl_dtype dtype, fcl_kv_dtype kv, fcl__options *opts) {
  decode_mma_options_at(lim, d, d_v, dtype, kv, 0, 0, opts);
}

START_TEST(decode_mma_caps_registers_where_it_paid) {
  fcl_device_limits h100 = made_up(48, 1024, 1);
  h100.compute_units = 132;
  h100.nvidia_sm = 90;
  const fcl_device_limits elsewhere = made_up(48, 1024, 0);
  fcl__options opts;
  decode_mma_options(&h100, 576, 512, FCL_DTYPE_F16, FCL_KV_AS_DTYPE, &opts);
  ck_assert_msg(strstr(opts.text, "-DMMA_REG_CAP=128 -cl-nv-maxrregcount=128"), "%s", opts.text);
  decode_mma_options(&h100, 128, 128, FCL_DTYPE_F16, FCL_KV_Q4_0, &opts);
  ck_assert_msg(strstr(opts.text, "-DDECODE_K_SCALE_AFTER=2 -DMMA_REG_CAP=168 "
                                  "-cl-nv-maxrregcount=168"), "%s", opts.text);
  decode_mma_options(&h100, 64, 64, FCL_DTYPE_F16, FCL_KV_Q4_0, &opts);
  ck_assert_msg(strstr(opts.text, "-DDECODE_K_SCALE_AFTER=2"), "%s", opts.text);
  /* int8 where the quad reads its rows (128 columns), not at 64 */
  decode_mma_options(&h100, 128, 128, FCL_DTYPE_F16, FCL_KV_Q8_0, &opts);
  ck_assert_msg(strstr(opts.text, "-DDECODE_K_SCALE_AFTER=2 -DMMA_REG_CAP=168 "
                                  "-cl-nv-maxrregcount=168"), "%s", opts.text);
  decode_mma_options(&h100, 64, 64, FCL_DTYPE_F16, FCL_KV_Q8_0, &opts);
  ck_assert_msg(!strstr(opts.text, "MMA_REG_CAP") && !strstr(opts.text, "K_SCALE_AFTER"), "%s",
                opts.text);
  const fcl_kv_dtype plain[] = {FCL_KV_AS_DTYPE, FCL_KV_FP8_E4M3};
  for (size_t i = 0; i < 2; ++i) {
    decode_mma_options(&h100, 128, 128, FCL_DTYPE_F16, plain[i], &opts);
    ck_assert_msg(!strstr(opts.text, "MMA_REG_CAP") && !strstr(opts.text, "K_SCALE_AFTER"),
                  "%s", opts.text);
  }
  decode_mma_options(&h100, 128, 128, FCL_DTYPE_BF16, FCL_KV_Q4_0, &opts);
  ck_assert_msg(!strstr(opts.text, "MMA_REG_CAP") && !strstr(opts.text, "K_SCALE_AFTER"), "%s",
                opts.text);
  decode_mma_options(&elsewhere, 576, 512, FCL_DTYPE_F16, FCL_KV_AS_DTYPE, &opts);
  ck_assert_msg(!strstr(opts.text, "MMA_REG_CAP") && !strstr(opts.text, "-cl-nv"), "%s",
                opts.text);
  decode_mma_options(&elsewhere, 128, 128, FCL_DTYPE_F16, FCL_KV_Q4_0, &opts);
  ck_assert_msg(strstr(opts.text, "-DDECODE_K_SCALE_AFTER=2") && !strstr(opts.text, "-cl-nv"),
                "%s", opts.text);
}
END_TEST

/* What the decode kernel on matrix instructions is told of a call, so that
 * it folds the paths the call never takes (KV_UNIT, FULL_WIDTHS): a
 * quantized cache's widest load unit over K's and V's views and lent
 * buffers; head_dim and head_dim_v at the padded widths (a quantized
 * cache's are multiples of 32; 100 pads to 128); neither in the wide
 * kernel. */
START_TEST(decode_mma_knows_its_units_and_widths) {
  const fcl_device_limits lim = made_up(48, 1024, 1);
  static const struct {
    size_t d, d_v;
    fcl_dtype dtype;
    fcl_kv_dtype kv;
    size_t k_offset;       /* bytes */
    unsigned lent_unit;    /* the lent buffers' (0: device-placed) */
    const char *has, *lacks, *lacks_too;
  } rows[] = {
      /* Q4_0: rows of 72 bytes (head_dim 128) and 36 (64: heads 4 bytes apart) */
      {128, 128, FCL_DTYPE_F16, FCL_KV_Q4_0, 0, 0, "-DKV_UNIT=8 -DFULL_WIDTHS=1", NULL, NULL},
      {64, 64, FCL_DTYPE_BF16, FCL_KV_Q4_0, 0, 0, "-DKV_UNIT=4 -DFULL_WIDTHS=1", NULL, NULL},
      {128, 128, FCL_DTYPE_F16, FCL_KV_Q4_0, 4, 0, "-DKV_UNIT=4 ", NULL, NULL},
      {128, 128, FCL_DTYPE_F16, FCL_KV_Q4_0, 2, 0, "-DKV_UNIT=2 ", NULL, NULL},
      {128, 128, FCL_DTYPE_F16, FCL_KV_Q4_0, 0, 4, "-DKV_UNIT=4 ", NULL, NULL},
      /* Q8_0: 136-byte rows, read in words of 8 */
      {128, 128, FCL_DTYPE_F16, FCL_KV_Q8_0, 0, 0, "-DKV_UNIT=8 -DFULL_WIDTHS=1", NULL, NULL},
      {128, 128, FCL_DTYPE_F16, FCL_KV_Q8_0, 2, 0, "-DKV_UNIT=2 ", NULL, NULL},
      /* fp8: rows of 128 bytes, 16-byte words */
      {128, 128, FCL_DTYPE_F16, FCL_KV_FP8_E4M3, 0, 0, "-DKV_UNIT=16 -DFULL_WIDTHS=1", NULL, NULL},
      {128, 128, FCL_DTYPE_F16, FCL_KV_FP8_E5M2, 8, 0, "-DKV_UNIT=8 -DFULL_WIDTHS=1", NULL, NULL},
      {100, 100, FCL_DTYPE_F16, FCL_KV_FP8_E4M3, 0, 0, "-DKV_UNIT=", "FULL_WIDTHS", NULL},
      /* a cache in the storage type: its widths only; the wide kernel neither */
      {128, 128, FCL_DTYPE_F16, FCL_KV_AS_DTYPE, 0, 0, "-DFULL_WIDTHS=1", "KV_UNIT", NULL},
      {100, 100, FCL_DTYPE_F16, FCL_KV_AS_DTYPE, 0, 0, "", "FULL_WIDTHS", NULL},
      {576, 512, FCL_DTYPE_F16, FCL_KV_AS_DTYPE, 0, 0, "", "FULL_WIDTHS", "KV_UNIT"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
    fcl__options opts;
    decode_mma_options_at(&lim, rows[i].d, rows[i].d_v, rows[i].dtype, rows[i].kv,
                          rows[i].k_offset, rows[i].lent_unit, &opts);
    ck_assert_msg(strstr(opts.text, rows[i].has) &&
                      !(rows[i].lacks && strstr(opts.text, rows[i].lacks)) &&
                      !(rows[i].lacks_too && strstr(opts.text, rows[i].lacks_too)),
                  "row %zu: %s", i, opts.text);
  }
}
END_TEST

/* The SIMT decode at head_dim 4, one row: its q is one float4, which IGC
 * gives 32 bytes as it does every __local array (ocloc: 1,056 bytes on
 * dg2 and pvc where the arrays declare 1,040); AMD's compiler reports what
 * the kernel declares. So the plan counts 16 bytes more on the Intel GPU
 * profiles only, and a multiple of 32 there. */
START_TEST(decode_local_bytes_follow_each_compiler) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 8, 8, 1, 8192, 4);
  size_t n = 0, intel = 0;
  const fcl_device_profile *profiles = fcl_device_profiles(&n);
  for (size_t i = 0; i < n; ++i) {
    const fcl_device_limits *lim = &profiles[i].info.limits;
    fcl_plan plan;
    char why[200] = "";
    ck_assert_msg(fcl_plan_flash(lim, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why) ==
                      FCL_SUCCESS, "%s: %s", profiles[i].key, why);
    if (plan.kernel != FCL_FLASH_KERNEL_DECODE || plan.block_q != 1) continue;
    const size_t declared = FCL_DECODE_LOCAL_BYTES(
        (size_t)plan.head_dim_padded, (size_t)plan.block_q, (size_t)plan.block_k,
        (size_t)plan.wg_size, (size_t)plan.threads_per_row,
        fcl__sums_by_shuffle(lim, plan.wg_size, plan.threads_per_row));
    const int is_intel = lim->vendor == FCL_VENDOR_INTEL && lim->is_gpu;
    intel += (size_t)is_intel;
    ck_assert_msg(plan.local_bytes == declared + (is_intel ? 16 : 0), "%s: %zu bytes, %zu declared",
                  profiles[i].key, (size_t)plan.local_bytes, declared);
    if (is_intel) ck_assert_uint_eq(plan.local_bytes % 32, 0);
  }
  ck_assert_uint_ge(intel, 2);
}
END_TEST

/* fcl_tiling_hint_given: each field a hint takes, alone, makes a hint; the
 * plan's other fields (what the planner reports) and NULL do not. */
START_TEST(a_hint_is_given_by_the_fields_a_hint_takes) {
  ck_assert_int_eq(fcl_tiling_hint_given(NULL), 0);
  const fcl_plan none = {0};
  ck_assert_int_eq(fcl_tiling_hint_given(&none), 0);
  const fcl_plan hints[] = {{.block_k = 16},         {.wg_size = 64},
                            {.threads_per_row = 2},  {.rows_per_thread = 1},
                            {.tile_elem_size = 2},   {.kernel = FCL_FLASH_KERNEL_SIMT},
                            {.splits = 2},           {.packed_heads = 1},
                            {.merge = FCL_SPLIT_MERGE_KERNEL}};
  for (size_t i = 0; i < sizeof hints / sizeof hints[0]; ++i)
    ck_assert_msg(fcl_tiling_hint_given(&hints[i]) == 1, "hint %zu not seen as given", i);
  const fcl_plan reported = {.block_q = 64, .head_dim_padded = 64, .local_bytes = 1024,
                             .tuned = 1};
  ck_assert_int_eq(fcl_tiling_hint_given(&reported), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("plan");
  TCase *tc = th_tcase("planner");
  tcase_add_test(tc, plans_fit_every_made_up_device);
  tcase_add_test(tc, cpu_devices_plan_the_cpu_kernels);
  tcase_add_test(tc, cpu_forward_takes_few_rows_where_blocks_have_them);
  tcase_add_test(tc, every_profile_plans_every_pass);
  tcase_add_test(tc, work_group_shrinks_to_fill_the_device);
  tcase_add_test(tc, a_device_too_small_is_unsupported_with_a_reason);
  tcase_add_test(tc, small_work_group_limits_are_respected);
  tcase_add_test(tc, forward_plan_on_the_h200);
  tcase_add_test(tc, forward_plan_on_the_h200_takes_the_tensor_cores);
  tcase_add_test(tc, mma_plans_fit_every_made_up_device);
  tcase_add_test(tc, backward_plans_fit_every_made_up_device);
  tcase_add_test(tc, backward_plan_on_the_h200);
  tcase_add_test(tc, backward_device_too_small_is_unsupported_with_a_reason);
  tcase_add_test(tc, backward_small_work_group_limits_are_respected);
  tcase_add_test(tc, half_storage_takes_larger_tiles_where_local_memory_limits_them);
  tcase_add_test(tc, tile_element_hints);
  tcase_add_test(tc, a_block_k_hint_below_the_minimum_names_it);
  tcase_add_test(tc, io_model_refuses_counts_past_64_bits);
  tcase_add_test(tc, a_hint_is_given_by_the_fields_a_hint_takes);
  tcase_add_test(tc, paged_plans_are_the_unpaged_ones);
  tcase_add_test(tc, decode_takes_the_products_whose_waves_fill_the_device);
  tcase_add_test(tc, decode_mma_caps_registers_where_it_paid);
  tcase_add_test(tc, decode_mma_knows_its_units_and_widths);
  tcase_add_test(tc, decode_local_bytes_follow_each_compiler);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
