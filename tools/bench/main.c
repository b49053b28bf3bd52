/*
 * main.c — flashcl-bench: for every device asked for, how fast each
 * algorithm is, how many bytes it moves, how close that is to the device's
 * measured ceilings, and (with --check) how exact it is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

#define MAX_DEVICES 32
#define MAX_SHAPES 256

void bench_apply_problem(const bench_options *o, fcl_attention_desc *d) {
  d->window_left = o->window_left;
  d->window_right = d->causal && o->window_right > 0 ? 0 : o->window_right;
  d->softcap = o->softcap;
  if (o->n_varlen) {
    d->cu_seqlens_q = o->cu_varlen_q;
    d->cu_seqlens_k = o->cu_varlen_k;
  }
  if (o->n_cache_lens) d->seqlens_k = o->cache_lens;
  fclu_set_layouts(d, o->layout);
  if (o->mla) bench_mla_views(d);
}


/* The decode sweep's largest batch x cache, in cached tokens. */
#define DECODE_MAX_TOKENS ((size_t)1 << 20)

/* Adds a shape once per storage type asked for, and with --batch-invariant
 * both, without then with the mode. */
static void add_shape(bench_shape *out, size_t *n, size_t capacity,
                      const fcl_attention_desc *desc, const bench_options *o) {
  const int modes = o->batch_invariant == BATCH_INVARIANT_BOTH ? 2 : 1;
  for (int t = 0; t < o->n_dtypes; ++t)
    for (int f = 0; f < o->n_kv_dtypes; ++f)
      for (int m = 0; m < modes; ++m)
        if (*n < capacity) {
          out[*n].desc = *desc;
          out[*n].desc.dtype = o->dtypes[t];
          out[*n].desc.kv_dtype = o->kv_dtypes[f];
          out[*n].desc.batch_invariant = o->batch_invariant == BATCH_INVARIANT_ON || m == 1;
          bench_apply_problem(o, &out[(*n)++].desc);
        }
}

size_t bench_shapes(const bench_options *o, const fcl_device_info *device,
                    bench_shape *out, size_t capacity) {
  int masks[2], n_masks = 0;
  if (o->causal != CAUSAL_ON) masks[n_masks++] = 0;
  if (o->causal != CAUSAL_OFF) masks[n_masks++] = 1;
  size_t n = 0;
  fcl_attention_desc d;
  if (!o->sweep) {
    for (int m = 0; m < n_masks; ++m) {
      fcl_attention_desc_init(&d, o->batch, o->heads, o->heads_kv, o->seqlen, o->seqlen_k,
                              o->head_dim);
      d.causal = masks[m];
      d.head_dim_v = o->head_dim_v;
      add_shape(out, &n, capacity, &d, o);
    }
    return n;
  }
  if (o->sweep_decode) {  /* one new row against a cache: B x cache, GQA 32/8, d 128 */
    const size_t gpu = device->limits.is_gpu;
    const size_t batches[3] = {1, 8, 64}, caches[4] = {1024, 8192, 32768, 131072};
    for (size_t bi = 0; bi < (gpu ? 3u : 2u); ++bi)
      for (size_t ci = 0; ci < (gpu ? 4u : 2u); ++ci) {
        /* up to 2^20 cached tokens: K and V of 4 GiB in f16, 8 in f32 */
        if (batches[bi] * caches[ci] > DECODE_MAX_TOKENS) continue;
        fcl_attention_desc_init(&d, batches[bi], 32, 8, 1, caches[ci], 128);
        d.causal = 1;
        add_shape(out, &n, capacity, &d, o);
      }
    return n;
  }
  /* flash-attn's benchmark on GPUs: 16k tokens, hidden 2048; on CPUs a
   * sweep of the same form that finishes in minutes. */
  const size_t tokens = device->limits.is_gpu ? 16384 : 2048;
  const size_t hidden = device->limits.is_gpu ? 2048 : 512;
  const size_t n_min = device->limits.is_gpu ? 512 : 256;
  const size_t dims[2] = {64, 128};
  for (int di = 0; di < 2; ++di)
    for (int m = 0; m < n_masks; ++m)
      for (size_t len = n_min; len <= tokens; len *= 2) {
        size_t heads = hidden / dims[di];
        fcl_attention_desc_init(&d, tokens / len, heads, heads, len, len, dims[di]);
        d.causal = masks[m];
        add_shape(out, &n, capacity, &d, o);
      }
  return n;
}

/* The devices to run on: every one for "all", else the one the selector
 * (or the library's default) picks. */
static size_t list_devices(const bench_options *o, bench_device *devices,
                           const char **selectors, char storage[][16]) {
  if (o->device && !strcmp(o->device, "all")) {
    fcl_device_info infos[MAX_DEVICES];
    size_t n = 0;
    if (fcl_devices(infos, MAX_DEVICES, &n) != FCL_SUCCESS) n = 0;
    if (n > MAX_DEVICES) n = MAX_DEVICES;
    for (size_t i = 0; i < n; ++i) {
      memset(&devices[i], 0, sizeof devices[i]);
      devices[i].info = infos[i];
      snprintf(storage[i], 16, "%u:%u", infos[i].platform_index, infos[i].device_index);
      selectors[i] = storage[i];
    }
    return n;
  }
  memset(&devices[0], 0, sizeof devices[0]);
  selectors[0] = o->device;
  return 1;
}

static void progress(const bench_options *o, size_t done, size_t total,
                     const bench_device *dev, const bench_results *all, size_t first) {
  if (o->quiet) return;
  fprintf(stderr, "[%zu/%zu] %s:", done, total, bench_device_label(dev));
  for (size_t i = first; i < all->count; ++i) {
    const bench_result *r = &all->items[i];
    if (i == first) {
      const fcl_attention_desc *d = &r->desc;
      fprintf(stderr, " %s B%zu H%zu N%zu d%zu%s", bench_pass_name(r->pass), d->batch,
              d->heads_q, d->seqlen_q, d->head_dim, d->causal ? " causal" : "");
    }
    if (r->status == FCL_SUCCESS)
      fprintf(stderr, "  %s %.3f ms", fcl_algo_name(r->algo), r->ms_median);
    else
      fprintf(stderr, "  %s %s", fcl_algo_name(r->algo), fcl_status_str(r->status));
  }
  fprintf(stderr, "\n");
}

/* The exit status the runs call for (bench_usage lists them): a failure
 * other than FCL_ERROR_UNSUPPORTED, or an unusable device, outweighs an
 * unsupported run. */
static int exit_status(const bench_device *devices, size_t n_devices,
                       const bench_results *all) {
  int failed = 0, unsupported = 0;
  for (size_t dv = 0; dv < n_devices; ++dv) failed |= devices[dv].status != FCL_SUCCESS;
  for (size_t i = 0; i < all->count; ++i) {
    const fcl_status st = all->items[i].status;
    unsupported |= st == FCL_ERROR_UNSUPPORTED;
    failed |= st != FCL_SUCCESS && st != FCL_ERROR_UNSUPPORTED;
  }
  return failed ? BENCH_EXIT_FAILED : unsupported ? BENCH_EXIT_UNSUPPORTED : BENCH_EXIT_OK;
}

int main(int argc, char **argv) {
  bench_options opts;
  char why[FCLU_WHY_LEN * 2];
  switch (bench_parse(argc, argv, &opts, why, sizeof why)) {
    case BENCH_PARSE_HELP: fputs(bench_usage(), stdout); return BENCH_EXIT_OK;
    case BENCH_PARSE_VERSION: printf("flashcl-bench %s\n", fcl_version_string()); return BENCH_EXIT_OK;
    case BENCH_PARSE_RUN: break;
    default:
      fprintf(stderr, "flashcl-bench: %s\nTry 'flashcl-bench --help'.\n", why);
      return BENCH_EXIT_USAGE;
  }

  static bench_device devices[MAX_DEVICES];
  static char selector_storage[MAX_DEVICES][16];
  const char *selectors[MAX_DEVICES];
  size_t n_devices = list_devices(&opts, devices, selectors, selector_storage);
  if (n_devices == 0) {
    fprintf(stderr, "flashcl-bench: no OpenCL device found (is an ICD installed, e.g. "
                    "pocl-opencl-icd?)\n");
    return 1;
  }

  bench_results all = {0};
  int usable = 0;
  for (size_t dv = 0; dv < n_devices; ++dv) {
    bench_device *dev = &devices[dv];
    fcl_context *ctx = NULL;
    dev->status = fcl_context_create(selectors[dv], &ctx);
    if (dev->status == FCL_SUCCESS) dev->status = fcl_context_device(ctx, &dev->info);
    if (dev->status == FCL_SUCCESS && opts.no_tuning)
      dev->status = fcl_context_use_tuned_plans(ctx, 0);
    if (dev->status == FCL_SUCCESS && fcl_tiling_hint_given(&opts.tiling))
      dev->status = fcl_context_set_flash_tiling(ctx, &opts.tiling);
    if (dev->status != FCL_SUCCESS) {
      snprintf(dev->message, sizeof dev->message, "%s", fcl_context_last_error(ctx));
      fprintf(stderr, "flashcl-bench: device %s: %s: %s\n",
              selectors[dv] ? selectors[dv] : "(default)", fcl_status_str(dev->status),
              dev->message);
      fcl_context_release(ctx);
      continue;
    }
    ++usable;
    if (opts.peaks) {
      if (!opts.quiet) fprintf(stderr, "%s: measuring copy bandwidth and FMA rate\n",
                               bench_device_label(dev));
      dev->have_peaks = fcl_measure_peaks(ctx, &dev->peaks) == FCL_SUCCESS;
      if (!dev->have_peaks && !opts.quiet)
        fprintf(stderr, "%s: peaks not measured: %s\n", bench_device_label(dev),
                fcl_context_last_error(ctx));
    }
    bench_shape shapes[MAX_SHAPES];
    size_t n_shapes = bench_shapes(&opts, &dev->info, shapes, MAX_SHAPES);
    for (size_t s = 0; s < n_shapes; ++s) {
      size_t first = all.count;
      bench_measure(ctx, (int)dv, &opts, &shapes[s].desc, opts.pass, &all);
      progress(&opts, s + 1, n_shapes, dev, &all, first);
    }
    /* what the calls did not fail on, e.g. a program built without its
     * sm_90a instructions (docs/design.md) */
    char log[4096];
    if (!opts.quiet && fcl_context_log(ctx, log, sizeof log))
      for (const char *line = log; *line;) {
        const size_t len = strcspn(line, "\n");
        fprintf(stderr, "%s: log: %.*s\n", bench_device_label(dev), (int)len, line);
        line += len + (line[len] == '\n');
      }
    fcl_context_release(ctx);
  }

  bench_print_table(stdout, devices, n_devices, &all, &opts);
  if (opts.io_table)
    for (size_t dv = 0; dv < n_devices; ++dv)
      if (devices[dv].status == FCL_SUCCESS) bench_print_io_table(stdout, &devices[dv], opts.dtype);

  int rc = exit_status(devices, n_devices, &all);
  if (!usable) rc = BENCH_EXIT_FAILED;
  if (opts.json && bench_write_json(opts.json, devices, n_devices, &all) != 0) {
    fprintf(stderr, "flashcl-bench: cannot write %s\n", opts.json);
    rc = BENCH_EXIT_FAILED;
  }
  if (opts.csv && bench_write_csv(opts.csv, devices, &all) != 0) {
    fprintf(stderr, "flashcl-bench: cannot write %s\n", opts.csv);
    rc = BENCH_EXIT_FAILED;
  }
  if (opts.svg && bench_write_svg(opts.svg, devices, n_devices, &all) != 0) {
    fprintf(stderr, "flashcl-bench: cannot write %s\n", opts.svg);
    rc = BENCH_EXIT_FAILED;
  }
  free(all.items);
  return rc;
}
