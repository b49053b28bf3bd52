/*
 * main.c — flashcl-info: every OpenCL device flashcl sees, with the limits the
 * planner reads, and the tiling and global-memory traffic it would choose
 * for a shape on each.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "flashcl.h"
#include "info.h"
#include "program.h"
#include "rules.h"

/* One pass's flash plan and the bytes both algorithms would move. With a
 * context (a device, not a profile) and no hint, the plan a call would
 * run there: its tuned plan or the rules'. *used gets the plan as a hint,
 * for the programs. */
static void show_pass(const fcl_device_info *dev, fcl_context *ctx, const fcl_attention_desc *d,
                      fcl_pass pass, const fcl_plan *hint, fcl_plan *used) {
  const char *name = pass == FCL_PASS_FORWARD ? "forward" : "backward";
  char why[256] = "";
  fcl_plan plan;
  const int from_context = ctx && !fcl_tiling_hint_given(hint);
  fcl_status st = from_context
                      ? fcl_context_plan(ctx, d, pass, &plan, why, sizeof why)
                      : fcl_plan_flash_hinted(&dev->limits, d, pass, hint, &plan, why, sizeof why);
  if (st != FCL_SUCCESS) {
    printf("      flash %s: %s: %s\n", name, fcl_status_str(st), why);
    return;
  }
  *used = plan;
  /* A CPU plan's one work-item owns the block's rows, 16 a vector. */
  char layout[96];
  if (plan.kernel == FCL_FLASH_KERNEL_CPU)
    snprintf(layout, sizeof layout, "1 work-item (%u rows, %u vector(s) of 16)",
             plan.block_q, plan.rows_per_thread);
  else
    snprintf(layout, sizeof layout, "%u work-items (%u per row, %u row(s) per work-item)",
             plan.wg_size, plan.threads_per_row, plan.rows_per_thread);
  printf("      flash %s plan: %s kernel, Br %u x Bc %u, %s, %zu B local (%u-byte tile "
         "elements), head_dim bucket %u%s\n",
         name, fcl_flash_kernel_name(plan.kernel), plan.block_q, plan.block_k, layout,
         plan.local_bytes, plan.tile_elem_size, plan.head_dim_padded,
         !from_context ? "" : plan.tuned ? " (tuned)" : " (rules)");
  if (plan.head_dim_v_padded)
    printf("      flash %s value width: V, O, dO and dV in a bucket of %u of their own\n", name,
           plan.head_dim_v_padded);
  if (plan.split_keys)
    printf("      flash %s splits: %u of %u keys (batch-invariant), merged by the %s\n", name,
           plan.splits, plan.split_keys, fcl_split_merge_name(plan.merge));
  if (plan.v_stages == 2)
    printf("      flash %s V tiles: 2, the next tile's fetched a tile ahead\n", name);
  if (plan.decode_untransposed)
    printf("      flash %s products: untransposed (S = Q K^T), whose waves fill this device "
           "better\n",
           name);
  unsigned cost, budget;  /* the SIMT forward's register cost model, where it plans */
  if (plan.kernel == FCL_FLASH_KERNEL_SIMT && pass == FCL_PASS_FORWARD && dev->limits.is_gpu &&
      !fcl__simt_forward_registers(&dev->limits, &plan, &cost, &budget))
    printf("      flash %s registers: %u private floats by the cost model, over the %u this "
           "device's compiler kept without spilling: no SIMT tiling fits (expect spills, "
           "or on MI300X one wave per SIMD)\n",
           name, cost, budget);
  fcl_io_estimate flash, naive;
  if (fcl_io_model(&dev->limits, d, FCL_ALGO_FLASH, pass, 1, &flash) == FCL_SUCCESS)
    printf("      flash %s traffic: %.2f MB\n", name,
           (double)(flash.bytes_loaded + flash.bytes_stored) / 1e6);
  st = fcl_io_model(&dev->limits, d, FCL_ALGO_NAIVE, pass, 1, &naive);
  if (st == FCL_SUCCESS)
    printf("      naive %s traffic: %.2f MB in %u chunk(s)\n", name,
           (double)(naive.bytes_loaded + naive.bytes_stored) / 1e6, naive.chunks);
  else
    printf("      naive %s: %s\n", name, fcl_status_str(st));
}

/* The programs a pass builds, one tab-separated line each (--programs). */
static void show_programs(const fcl_device_info *dev, const fcl_attention_desc *d,
                          fcl_pass pass, const fcl_plan *hint) {
  fcl_program_info programs[FCL_MAX_PASS_PROGRAMS];
  unsigned n = 0;
  char why[256] = "";
  if (fcl_flash_programs_hinted(&dev->limits, d, pass, hint, programs, &n, why, sizeof why) !=
      FCL_SUCCESS)
    return;  /* show_pass said why */
  for (unsigned i = 0; i < n; ++i) {
    const fcl_program_info *p = &programs[i];
    printf("program\t%s\t%s\t%s\t%s%s%s\t%zu\t%u\t%s\n",
           pass == FCL_PASS_FORWARD ? "forward" : "backward", p->file,
           p->prelude ? p->prelude : "-", p->kernels[0], p->kernels[1] ? "," : "",
           p->kernels[1] ? p->kernels[1] : "", p->local_bytes, p->wg_size, p->options);
  }
}

static void show_plan(const fcl_device_info *dev, fcl_context *ctx, const fcl_attention_desc *d,
                      int programs, const fcl_plan *hint) {
  printf("    B%zu H%zu/%zu N%zu/%zu d%zu %s%s:\n", d->batch, d->heads_q, d->heads_kv,
         d->seqlen_q, d->seqlen_k, d->head_dim, fcl_dtype_name(d->dtype),
         d->causal ? " causal" : "");
  /* the decode kernels are forwards: the backward keeps the planner's */
  const fcl_plan *backward = fcl__kernel_forward_only(hint->kernel) ? NULL : hint;
  /* the programs of the plans shown: a context's tuned plan is a hint */
  fcl_plan used[2] = {{0}, {0}};
  show_pass(dev, ctx, d, FCL_PASS_FORWARD, hint, &used[0]);
  show_pass(dev, ctx, d, FCL_PASS_BACKWARD, backward, &used[1]);
  if (programs) {
    show_programs(dev, d, FCL_PASS_FORWARD, used[0].tuned ? &used[0] : hint);
    show_programs(dev, d, FCL_PASS_BACKWARD, used[1].tuned ? &used[1] : backward);
  }
}

static const char *vendor_name(unsigned vendor) {
  switch (vendor) {
    case FCL_VENDOR_NVIDIA: return "NVIDIA";
    case FCL_VENDOR_AMD: return "AMD";
    case FCL_VENDOR_INTEL: return "Intel";
    default: return "other";
  }
}

/* A device's limits as the planner reads them, then the shape's plans. */
static void show_device(const fcl_device_info *d, fcl_context *ctx,
                        const fcl_attention_desc *descs, int n_descs, int programs,
                        const fcl_plan *hint) {
  const fcl_device_limits *l = &d->limits;
  printf("    %s, %u compute units", l->is_gpu ? "GPU" : "not a GPU", l->compute_units);
  if (d->max_clock_mhz) printf(" at %u MHz", d->max_clock_mhz);
  printf("\n");
  static const char *const shuffles[] = {"none (row sums through local memory)", "NVIDIA PTX",
                                         "Intel sub-groups", "AMD ds_bpermute"};
  printf("    planned as: vendor %s, sub-groups of %u%s, shuffles %s, local memory %llu B\n",
         vendor_name(l->vendor), l->sub_group_size, l->sub_group_size ? "" : " (unknown)",
         l->shuffle < 4 ? shuffles[l->shuffle] : "?", (unsigned long long)l->local_mem_bytes);
  printf("    work-groups up to %zu, global %.1f GiB, largest allocation %.1f GiB\n",
         l->max_work_group_size, (double)l->global_mem_bytes / (1 << 30),
         (double)l->max_alloc_bytes / (1 << 30));
  printf("    fp16 %s, fp64 %s, 64-bit atomics %s, inline PTX %s\n", l->has_fp16 ? "yes" : "no",
         l->has_fp64 ? "yes" : "no", l->has_int64_atomics ? "yes" : "no",
         l->nvidia_ptx ? "yes" : "no");
  if (l->nvidia_sm)
    printf("    NVIDIA compute capability %u.%u%s\n", l->nvidia_sm / 10, l->nvidia_sm % 10,
           l->nvidia_sm >= 80 ? ": tensor cores through mma.sync" : "");
  fcl_tuning_info tuning;
  if (ctx && fcl_context_tuning(ctx, &tuning) == FCL_SUCCESS) {
    if (tuning.plans)
      printf("    tuned plans: %u bucket(s) from %s%s\n", tuning.plans, tuning.source,
             tuning.enabled ? "" : " (switched off)");
    else
      printf("    tuned plans: none (flashcl-tune writes %s in the tuning folder); the rules "
             "plan\n", tuning.file_name);
    char log[2048];
    if (fcl_context_log(ctx, log, sizeof log)) printf("    log: %s", log);
  }
  for (int k = 0; k < n_descs; ++k) show_plan(d, ctx, &descs[k], programs, hint);
}

/* --profile: the library's described devices instead of the drivers'. */
static int show_profiles(const info_options *opts, const fcl_attention_desc *descs,
                         int n_descs) {
  size_t n = 0;
  const fcl_device_profile *profiles = fcl_device_profiles(&n);
  const int list = !strcmp(opts->profile, "list"), all = !strcmp(opts->profile, "all");
  int shown = 0;
  for (size_t i = 0; i < n; ++i) {
    const fcl_device_profile *p = &profiles[i];
    if (!list && !all && strcmp(opts->profile, p->key)) continue;
    ++shown;
    if (list) {
      printf("%s\t%s\t%s\n", p->key, p->compiler, p->source);
      continue;
    }
    fcl_device_info info = p->info;
    if (opts->shuffle) info.limits.shuffle = (unsigned)(opts->shuffle - 1);
    /* the programs alone, as vendor-check.sh reads them */
    if (opts->grid) return info_grid(opts, &info.limits);
    printf("\nprofile %s: %s\n    compiled as: %s\n    source: %s\n", p->key, p->info.name,
           p->compiler, p->source);
    show_device(&info, NULL, descs, n_descs, opts->programs, &opts->hint);
  }
  if (!shown) {
    fprintf(stderr, "flashcl-info: no profile '%s' (flashcl-info --profile list)\n",
            opts->profile);
    return 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  info_options opts;
  char why[FCLU_WHY_LEN * 2];
  switch (info_parse(argc, argv, &opts, why, sizeof why)) {
    case INFO_PARSE_HELP: fputs(info_usage(), stdout); return 0;
    case INFO_PARSE_VERSION: printf("flashcl-info %s\n", fcl_version_string()); return 0;
    case INFO_PARSE_RUN: break;
    default:
      fprintf(stderr, "flashcl-info: %s\nTry 'flashcl-info --help'.\n", why);
      return 2;
  }
  if (opts.wgmma_probe) return info_wgmma_probe(&opts);
  if (opts.ptx_unmark) return info_ptx_unmark(opts.ptx_unmark);
  if (opts.program_text) {
    const char *texts[FCL__PROGRAM_TEXTS_MAX];
    const size_t n_texts = fcl__program_texts_of(opts.program_text, texts);
    if (!n_texts) {
      fprintf(stderr, "flashcl-info: '%s' is no kernel file of the library\n", opts.program_text);
      return 2;
    }
    for (size_t i = 0; i < n_texts; ++i) fputs(texts[i], stdout);
    return 0;
  }
  /* The shape is judged by the library, as a call would judge it, before
   * any device is listed. */
  fcl_attention_desc descs[2];
  const int n_descs = info_descs(&opts, descs);
  for (int k = 0; k < n_descs; ++k) {
    fcl_buffer_sizes sizes;
    fcl_status st = fcl_attention_buffer_sizes(&descs[k], &sizes, why, sizeof why);
    if (st != FCL_SUCCESS) {
      fprintf(stderr, "flashcl-info: %s: %s\n", fcl_status_str(st), why);
      return 2;
    }
  }

  if (opts.profile) return show_profiles(&opts, descs, n_descs);

  fcl_device_info devs[32];
  size_t n = 0;
  if (fcl_devices(devs, 32, &n) != FCL_SUCCESS || n == 0) {
    printf("No OpenCL device found (is an ICD installed, e.g. pocl-opencl-icd?).\n");
    return 1;
  }
  printf("flashcl %s: %zu OpenCL device(s)\n", fcl_version_string(), n);
  for (size_t i = 0; i < n && i < 32; ++i) {
    const fcl_device_info *d = &devs[i];
    printf("\n[%u:%u] %s\n", d->platform_index, d->device_index, d->name);
    printf("    platform %s; %s; driver %s; vendor %s\n", d->platform, d->version, d->driver,
           d->vendor);
    /* a context reads the device's tuning database */
    char selector[32];
    snprintf(selector, sizeof selector, "%u:%u", d->platform_index, d->device_index);
    fcl_context *ctx = NULL;
    if (fcl_context_create(selector, &ctx) != FCL_SUCCESS) {
      fcl_context_release(ctx);
      ctx = NULL;
    }
    show_device(d, ctx, descs, n_descs, opts.programs, &opts.hint);
    fcl_context_release(ctx);
  }
  return 0;
}
