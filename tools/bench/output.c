/*
 * output.c — flashcl-bench's reports: the table on stdout, the I/O table,
 * and the JSON and CSV files (their fields are a contract: docs/design.md).
 */
#include <math.h>
#include <string.h>

#include "bench.h"

const char *bench_pass_name(int pass) {
  return pass == PASS_BWD ? "bwd" : pass == PASS_FWDBWD ? "fwdbwd" : "fwd";
}

const char *bench_device_label(const bench_device *device) {
  return device->info.name[0] ? device->info.name : "(unnamed device)";
}

/* ---- table ---------------------------------------------------------------- */

static void print_device_header(FILE *out, const bench_device *dev) {
  fprintf(out, "\n== %s  [%u:%u, %s, %s]\n", bench_device_label(dev), dev->info.platform_index,
          dev->info.device_index, dev->info.platform, dev->info.version);
  if (dev->status != FCL_SUCCESS) {
    fprintf(out, "   unusable: %s: %s\n", fcl_status_str(dev->status), dev->message);
    return;
  }
  fprintf(out, "   %u compute units, %llu KiB local memory, work-groups up to %zu",
          dev->info.limits.compute_units,
          (unsigned long long)(dev->info.limits.local_mem_bytes / 1024),
          dev->info.limits.max_work_group_size);
  if (dev->have_peaks)
    fprintf(out, "; measured peaks: copy %.0f GB/s, fp32 FMA %.2f TFLOP/s", dev->peaks.copy_gbps,
            dev->peaks.fma_tflops);
  fprintf(out, "\n");
}

/* The problem options every shape of the run takes, when any is set. */
static void print_problem(FILE *out, const bench_options *o) {
  char line[256] = "";
  size_t n = 0;
#define ITEM(...) n += (size_t)snprintf(line + n, n < sizeof line ? sizeof line - n : 0, __VA_ARGS__)
  if (o->window_left >= 0 || o->window_right >= 0)
    ITEM(", window %d,%d", o->window_left, o->window_right);
  if (o->softcap) ITEM(", softcap %g", o->softcap);
  if (o->alibi) ITEM(", ALiBi");
  if (o->sinks && isnan(o->sinks_value)) ITEM(", sinks (random)");
  if (o->sinks && !isnan(o->sinks_value)) ITEM(", sinks %g", o->sinks_value);
  if (o->n_varlen)
    ITEM(", ragged: %d sequences, %d query tokens", o->n_varlen, o->cu_varlen_q[o->n_varlen]);
  if (o->n_cache_lens) ITEM(", KV cache: %d lengths, capacity %zu", o->n_cache_lens, o->seqlen_k);
  if (o->layout != FCLU_BSHD) ITEM(", layout %s", fclu_layout_name(o->layout));
  if (o->page_size) ITEM(", paged K and V, %zu tokens a page", o->page_size);
  if (o->batch_invariant == BATCH_INVARIANT_ON) ITEM(", batch-invariant");
#undef ITEM
  if (!n) return;
  fprintf(out, "   every shape:%s\n", line + 1);
  if (o->n_varlen) fprintf(out, "   (B, Nq and Nk below: the sequences and the longest lengths)\n");
}

void bench_print_table(FILE *out, const bench_device *devices, size_t n_devices,
                       const bench_results *all, const bench_options *opts) {
  for (size_t dv = 0; dv < n_devices; ++dv) {
    const bench_device *dev = &devices[dv];
    print_device_header(out, dev);
    if (dev->status == FCL_SUCCESS) print_problem(out, opts);
    int header = 0;
    for (size_t i = 0; i < all->count; ++i) {
      const bench_result *r = &all->items[i];
      if (r->device != (int)dv) continue;
      if (!header) {
        fprintf(out, "%-6s %-4s %3s %4s %4s %6s %6s %4s %-3s %-5s %9s %9s %8s %4s %8s %4s %7s",
                "pass", "type", "B", "H", "Hkv", "Nq", "Nk", "d", "cau", "algo", "ms", "MB",
                "GB/s", "%bw", "TFLOP/s", "%fma", "speedup");
        if (opts->count_io) fprintf(out, " %9s", "counted");
        if (opts->check) fprintf(out, " %9s %6s", "max_err", "ratio");
        if (opts->batch_invariant) fprintf(out, " %3s", "inv");
        fprintf(out, "\n");
        header = 1;
      }
      const fcl_attention_desc *d = &r->desc;
      char label[32];
      fprintf(out, "%-6s %-4s %3zu %4zu %4zu %6zu %6zu %4zu %-3s %-5s ", bench_pass_name(r->pass),
              bench_dtype_label(d, label, sizeof label), d->batch, d->heads_q, d->heads_kv, d->seqlen_q,
              d->seqlen_k, d->head_dim, d->causal ? "yes" : "no", fcl_algo_name(r->algo));
      if (r->status != FCL_SUCCESS) {
        fprintf(out, "%s: %s\n", fcl_status_str(r->status), r->message);
        continue;
      }
      char bw[8] = "-", fma[8] = "-", speed[16] = "-";
      if (dev->have_peaks && dev->peaks.copy_gbps > 0)
        snprintf(bw, sizeof bw, "%.0f%%", 100.0 * r->gbps / dev->peaks.copy_gbps);
      if (dev->have_peaks && dev->peaks.fma_tflops > 0)
        snprintf(fma, sizeof fma, "%.0f%%", 100.0 * r->tflops / dev->peaks.fma_tflops);
      if (r->speedup > 0) snprintf(speed, sizeof speed, "%.2fx", r->speedup);
      fprintf(out, "%9.3f %9.1f %8.1f %4s %8.2f %4s %7s", r->ms_median,
              (double)r->bytes_model / 1e6, r->gbps, bw, r->tflops, fma, speed);
      if (opts->count_io) {
        if (r->have_counted)
          fprintf(out, " %9s", r->bytes_counted == r->bytes_model ? "=model" : "DIFFERS");
        else
          fprintf(out, " %9s", "-");
      }
      if (opts->check) {
        if (r->have_check) fprintf(out, " %9.2e %6.2f", r->max_abs_err, r->err_ratio);
        else fprintf(out, " %9s %6s", "-", "-");
        /* a quantized cache: max_err is over what it holds; this, over the unquantised K, V */
        if (r->have_unquantised) fprintf(out, "  vs unquantised %.2e", r->max_abs_err_unquantised);
      }
      if (opts->batch_invariant) fprintf(out, " %3s", d->batch_invariant ? "yes" : "no");
      fprintf(out, "\n");
    }
  }
}

/* ---- the I/O table ------------------------------------------------------- */

/* The I/O table's problems: flash-attn's benchmark family (16k tokens,
 * hidden 2048), so that the planner sees a device-filling launch as in real
 * use; figures are then divided per attention head. A lone head would make
 * the planner shrink its row blocks to occupy the device, and re-read K
 * and V accordingly. */
#define IO_TABLE_TOKENS 16384
#define IO_TABLE_HIDDEN 2048

void bench_print_io_table(FILE *out, const bench_device *device, fcl_dtype dtype) {
  const fcl_device_limits *lim = &device->info.limits;
  fprintf(out,
          "\nGlobal-memory traffic per attention head (forward, %s, no mask; batch x N = "
          "%d tokens, hidden %d), on %s with %llu KiB local memory:\n",
          fcl_dtype_name(dtype), IO_TABLE_TOKENS, IO_TABLE_HIDDEN, bench_device_label(device),
          (unsigned long long)(lim->local_mem_bytes / 1024));
  fprintf(out, "%4s %7s %12s %12s %8s   %12s %12s   %s\n", "d", "N", "naive MB", "flash MB",
          "ratio", "Θ(Nd+N²) MB", "Θ(N²d²/M) MB", "flash tiles (Br x Bc)");
  const size_t dims[2] = {64, 128};
  for (int di = 0; di < 2; ++di)
    for (size_t n = 256; n <= 65536; n *= 2) {
      const size_t batch = n < IO_TABLE_TOKENS ? IO_TABLE_TOKENS / n : 1;
      const size_t heads = IO_TABLE_HIDDEN / dims[di];
      const double per_head = 1e6 * (double)(batch * heads);
      fcl_attention_desc d;
      fcl_attention_desc_init(&d, batch, heads, heads, n, n, dims[di]);
      d.dtype = dtype;
      fcl_io_estimate naive, flash;
      fcl_status sn = fcl_io_model(lim, &d, FCL_ALGO_NAIVE, FCL_PASS_FORWARD, 1, &naive);
      fcl_status sf = fcl_io_model(lim, &d, FCL_ALGO_FLASH, FCL_PASS_FORWARD, 1, &flash);
      if (sf != FCL_SUCCESS) {
        fprintf(out, "%4zu %7zu   flash: %s\n", dims[di], n, fcl_status_str(sf));
        continue;
      }
      double fb = (double)(flash.bytes_loaded + flash.bytes_stored) / per_head;
      if (sn == FCL_SUCCESS) {
        double nb = (double)(naive.bytes_loaded + naive.bytes_stored) / per_head;
        fprintf(out, "%4zu %7zu %12.2f %12.2f %7.1fx   %12.2f %12.2f   %u x %u\n", dims[di], n,
                nb, fb, nb / fb, naive.bytes_asymptotic / per_head,
                flash.bytes_asymptotic / per_head, flash.plan.block_q, flash.plan.block_k);
      } else {
        fprintf(out, "%4zu %7zu %12s %12.2f %8s   %12s %12.2f   %u x %u\n", dims[di], n,
                sn == FCL_ERROR_UNSUPPORTED ? "unsupported" : "(too big)", fb, "-", "-",
                flash.bytes_asymptotic / per_head,
                flash.plan.block_q, flash.plan.block_k);
      }
    }
}

/* ---- JSON ---------------------------------------------------------------- */

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void json_number(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, "%.9g", x);
  else fprintf(f, "null");
}

/* A ragged batch's lengths from its prefix sums, or null. */
static void json_lengths(FILE *f, const fcl_attention_desc *d, const int32_t *cu) {
  if (!cu) {
    fprintf(f, "null");
    return;
  }
  fputc('[', f);
  for (size_t b = 0; b < d->batch; ++b) fprintf(f, "%s%d", b ? ", " : "", cu[b + 1] - cu[b]);
  fputc(']', f);
}

/* The problem beyond its shape: mask, transforms, ragged batch, layout. */
static void json_problem(FILE *f, const bench_result *r) {
  const fcl_attention_desc *d = &r->desc;
  fprintf(f, ", \"window_left\": %d, \"window_right\": %d, \"softcap\": ", d->window_left,
          d->window_right);
  json_number(f, d->softcap);
  fprintf(f, ", \"alibi\": %s, \"seqlens_q\": ", r->alibi ? "true" : "false");
  json_lengths(f, d, d->cu_seqlens_q);
  fprintf(f, ", \"seqlens_k\": ");
  if (d->seqlens_k) {  /* a cache's lengths */
    fputc('[', f);
    for (size_t b = 0; b < d->batch; ++b) fprintf(f, "%s%d", b ? ", " : "", d->seqlens_k[b]);
    fputc(']', f);
  } else {
    json_lengths(f, d, d->cu_seqlens_q ? (d->cu_seqlens_k ? d->cu_seqlens_k : d->cu_seqlens_q) : NULL);
  }
  fprintf(f, ", \"layout\": \"%s\", \"page_size\": %zu", fclu_layout_name(r->layout),
          d->page_size);
  fprintf(f, ", \"kv_dtype\": \"%s\", \"max_abs_err_unquantised\": ",
          fcl_kv_dtype_name(d->kv_dtype));
  json_number(f, r->have_unquantised ? r->max_abs_err_unquantised : NAN);
  fprintf(f, ", \"batch_invariant\": %s", d->batch_invariant ? "true" : "false");
  fprintf(f, ", \"head_dim_v\": %zu", fclu_head_dim_v(d));
}

const char *bench_dtype_label(const fcl_attention_desc *d, char *buf, size_t len) {
  if (d->kv_dtype == FCL_KV_AS_DTYPE) return fcl_dtype_name(d->dtype);
  snprintf(buf, len, "%s+%s", fcl_dtype_name(d->dtype), fcl_kv_dtype_name(d->kv_dtype));
  return buf;
}

int bench_write_json(const char *path, const bench_device *devices, size_t n_devices,
                     const bench_results *all) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "{\n  \"flashcl_version\": \"%s\",\n  \"devices\": [", fcl_version_string());
  for (size_t i = 0; i < n_devices; ++i) {
    const bench_device *d = &devices[i];
    const fcl_device_limits *l = &d->info.limits;
    fprintf(f, "%s\n    {\"index\": %zu, \"selector\": \"%u:%u\", \"name\": ", i ? "," : "", i,
            d->info.platform_index, d->info.device_index);
    json_string(f, d->info.name);
    fprintf(f, ", \"vendor\": ");
    json_string(f, d->info.vendor);
    fprintf(f, ", \"platform\": ");
    json_string(f, d->info.platform);
    fprintf(f, ", \"version\": ");
    json_string(f, d->info.version);
    fprintf(f, ", \"driver\": ");
    json_string(f, d->info.driver);
    fprintf(f,
            ", \"is_gpu\": %s, \"compute_units\": %u, \"local_mem_bytes\": %llu, "
            "\"max_work_group_size\": %zu, \"global_mem_bytes\": %llu, "
            "\"max_alloc_bytes\": %llu, \"fp16\": %s, \"fp64\": %s",
            l->is_gpu ? "true" : "false", l->compute_units,
            (unsigned long long)l->local_mem_bytes, l->max_work_group_size,
            (unsigned long long)l->global_mem_bytes, (unsigned long long)l->max_alloc_bytes,
            l->has_fp16 ? "true" : "false", l->has_fp64 ? "true" : "false");
    fprintf(f, ", \"peak_copy_gbps\": ");
    json_number(f, d->have_peaks ? d->peaks.copy_gbps : NAN);
    fprintf(f, ", \"peak_fma_tflops\": ");
    json_number(f, d->have_peaks ? d->peaks.fma_tflops : NAN);
    fprintf(f, ", \"status\": \"%s\"", d->status == FCL_SUCCESS ? "ok" : fcl_status_str(d->status));
    if (d->status != FCL_SUCCESS) {
      fprintf(f, ", \"message\": ");
      json_string(f, d->message);
    }
    fprintf(f, "}");
  }
  fprintf(f, "\n  ],\n  \"results\": [");
  for (size_t i = 0; i < all->count; ++i) {
    const bench_result *r = &all->items[i];
    const fcl_attention_desc *d = &r->desc;
    const bench_device *dev = &devices[r->device];
    fprintf(f, "%s\n    {\"device\": ", i ? "," : "");
    json_string(f, bench_device_label(dev));
    fprintf(f,
            ", \"device_index\": %d, \"algo\": \"%s\", \"pass\": \"%s\", \"dtype\": \"%s\", "
            "\"batch\": %zu, \"heads\": %zu, \"heads_kv\": %zu, \"seqlen_q\": %zu, "
            "\"seqlen_k\": %zu, \"head_dim\": %zu, \"causal\": %s, \"scale\": ",
            r->device, fcl_algo_name(r->algo), bench_pass_name(r->pass),
            fcl_dtype_name(d->dtype), d->batch, d->heads_q, d->heads_kv, d->seqlen_q,
            d->seqlen_k, d->head_dim, d->causal ? "true" : "false");
    json_number(f, d->scale);
    json_problem(f, r);
    int ok = r->status == FCL_SUCCESS;
    fprintf(f, ", \"ms_median\": ");
    json_number(f, ok ? r->ms_median : NAN);
    fprintf(f, ", \"ms_min\": ");
    json_number(f, ok ? r->ms_min : NAN);
    fprintf(f, ", \"calls_per_sample\": %d", r->calls_per_sample);
    if (ok) fprintf(f, ", \"bytes_model\": %llu", (unsigned long long)r->bytes_model);
    else fprintf(f, ", \"bytes_model\": null");
    if (ok && r->have_counted)
      fprintf(f, ", \"bytes_counted\": %llu", (unsigned long long)r->bytes_counted);
    else fprintf(f, ", \"bytes_counted\": null");
    fprintf(f, ", \"flops\": ");
    json_number(f, r->flops);
    fprintf(f, ", \"gbps\": ");
    json_number(f, ok ? r->gbps : NAN);
    fprintf(f, ", \"tflops\": ");
    json_number(f, ok ? r->tflops : NAN);
    fprintf(f, ", \"frac_peak_bw\": ");
    json_number(f, ok && dev->have_peaks ? r->gbps / dev->peaks.copy_gbps : NAN);
    fprintf(f, ", \"frac_peak_flops\": ");
    json_number(f, ok && dev->have_peaks ? r->tflops / dev->peaks.fma_tflops : NAN);
    fprintf(f, ", \"speedup_vs_naive\": ");
    json_number(f, ok && r->speedup > 0 ? r->speedup : NAN);
    fprintf(f, ", \"max_abs_err\": ");
    json_number(f, r->have_check ? r->max_abs_err : NAN);
    fprintf(f, ", \"naive_max_abs_err\": ");
    json_number(f, r->have_check ? r->naive_max_abs_err : NAN);
    fprintf(f, ", \"err_ratio\": ");
    json_number(f, r->have_check ? r->err_ratio : NAN);
    fprintf(f, ", \"status\": \"%s\"", ok ? "ok" : fcl_status_str(r->status));
    if (!ok) {
      fprintf(f, ", \"message\": ");
      json_string(f, r->message);
    }
    fprintf(f,
            ", \"chunks\": %u, \"plan\": {\"block_q\": %u, \"block_k\": %u, \"wg_size\": %u, "
            "\"threads_per_row\": %u, \"rows_per_thread\": %u, \"local_bytes\": %zu, "
            "\"tile_elem_size\": %u, \"kernel\": \"%s\", \"splits\": %u, \"merge\": \"%s\", "
            "\"packed_heads\": %u, \"tuned\": %u, \"split_keys\": %u, "
            "\"decode_untransposed\": %u, \"v_stages\": %u}}",
            r->chunks, r->plan.block_q, r->plan.block_k, r->plan.wg_size,
            r->plan.threads_per_row, r->plan.rows_per_thread, r->plan.local_bytes,
            r->plan.tile_elem_size, fcl_flash_kernel_name(r->plan.kernel),
            r->plan.splits, fcl_split_merge_name(r->plan.merge), r->plan.packed_heads,
            r->plan.tuned, r->plan.split_keys, r->plan.decode_untransposed, r->plan.v_stages);
  }
  fprintf(f, "\n  ]\n}\n");
  return fclose(f) == 0 ? 0 : -1;
}

/* ---- CSV ------------------------------------------------------------------ */

static void csv_cell(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

int bench_write_csv(const char *path, const bench_device *devices, const bench_results *all) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f,
          "device,algo,pass,dtype,batch,heads,heads_kv,seqlen_q,seqlen_k,head_dim,causal,"
          "ms_median,ms_min,bytes_model,bytes_counted,flops,gbps,tflops,speedup_vs_naive,"
          "max_abs_err,naive_max_abs_err,err_ratio,status,block_q,block_k,wg_size,"
          "local_bytes,message,window_left,window_right,softcap,alibi,ragged,layout,kv_dtype,"
          "batch_invariant\n");
  for (size_t i = 0; i < all->count; ++i) {
    const bench_result *r = &all->items[i];
    const fcl_attention_desc *d = &r->desc;
    int ok = r->status == FCL_SUCCESS;
    csv_cell(f, bench_device_label(&devices[r->device]));
    fprintf(f, ",%s,%s,%s,%zu,%zu,%zu,%zu,%zu,%zu,%d,", fcl_algo_name(r->algo),
            bench_pass_name(r->pass), fcl_dtype_name(d->dtype), d->batch, d->heads_q,
            d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim, d->causal);
    if (ok)
      fprintf(f, "%.6g,%.6g,%llu,", r->ms_median, r->ms_min, (unsigned long long)r->bytes_model);
    else
      fprintf(f, ",,,");
    if (ok && r->have_counted) fprintf(f, "%llu", (unsigned long long)r->bytes_counted);
    fprintf(f, ",%.6g,", r->flops);
    if (ok) fprintf(f, "%.6g,%.6g,", r->gbps, r->tflops);
    else fprintf(f, ",,");
    if (ok && r->speedup > 0) fprintf(f, "%.4g", r->speedup);
    fprintf(f, ",");
    if (r->have_check)
      fprintf(f, "%.6g,%.6g,%.6g", r->max_abs_err, r->naive_max_abs_err, r->err_ratio);
    else
      fprintf(f, ",,");
    fprintf(f, ",%s,%u,%u,%u,%zu,", ok ? "ok" : fcl_status_str(r->status), r->plan.block_q,
            r->plan.block_k, r->plan.wg_size, r->plan.local_bytes);
    csv_cell(f, ok ? "" : r->message);
    /* Appended after message, so older readers' columns keep their places. */
    fprintf(f, ",%d,%d,%.6g,%d,%d,%s,%s,%d\n", d->window_left, d->window_right, d->softcap,
            r->alibi, d->cu_seqlens_q != NULL, fclu_layout_name(r->layout),
            fcl_kv_dtype_name(d->kv_dtype), d->batch_invariant);
  }
  return fclose(f) == 0 ? 0 : -1;
}
