/*
 * options.c — flashcl-info's command line, parsed with the same strict
 * parser as flashcl-bench's (util/cli.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "info.h"

static const char usage[] =
    "usage: flashcl-info [--head-dim D] [--seqlen N] [--seqlen-k NK] [--heads H]\n"
    "                    [--heads-kv HKV] [--batch B] [--causal] [--dtype f32|f16|bf16]\n"
    "                    [--profile KEY|all] [--shuffle S] [--programs] [--kernel K]\n"
    "                    [--splits S] [--batch-invariant] [--head-dim-v DV]\n"
    "       flashcl-info --program-text FILE\n"
    "       flashcl-info --profile KEY --grid full|cover|ci\n"
    "       flashcl-info --wgmma-probe [--wgmma-reps R]\n"
    "       flashcl-info --ptx-unmark FILE\n"
    "\n"
    "Lists every OpenCL device with the limits flashcl plans with, then the flash\n"
    "tilings (forward and backward) and the global-memory bytes of both\n"
    "algorithms, per pass, for one shape (default: batch 1, 16 heads, seqlen\n"
    "4096, head_dim 64 and 128).\n"
    "\n"
    "  --head-dim-v DV  V's and O's head size (default: head_dim): DeepSeek's\n"
    "                 latent attention decodes at --head-dim 576 --head-dim-v 512\n"
    "                 (the decode kernels' alone)\n"
    "  --profile KEY  a device described by the library instead of the OpenCL\n"
    "                 devices (no driver needed); 'all' for every profile, 'list'\n"
    "                 for their keys and sources\n"
    "  --shuffle S    plan a profile with sub-group shuffles S instead of its own:\n"
    "                 none (row sums through local memory), intel or amd\n"
    "  --programs     also each program a pass builds: one line per program,\n"
    "                 'program<TAB>pass<TAB>file<TAB>prelude<TAB>kernels<TAB>\n"
    "                 local bytes<TAB>work-group size<TAB>build options', as\n"
    "                 scripts/vendor-check.sh reads them\n"
    "  --kernel K     the flash kernels asked for: auto (the planner's), simt,\n"
    "                 mma, decode, decode-mma, cpu or wgmma (the decode,\n"
    "                 CPU and wgmma kernels: forward only; the backward keeps the\n"
    "                 planner's), as fcl_context_set_flash_tiling forces them\n"
      "  --splits S     the forward's key splits asked for (0: the planner's)\n"
    "  --batch-invariant\n"
    "                 plan with fcl_attention_desc.batch_invariant (the splits\n"
    "                 of fixed size it takes are shown)\n"
    "  --head-dim-v DV  V's, O's and their gradients' head size (default: head_dim;\n"
    "                 DeepSeek's prefill: --head-dim 192 --head-dim-v 128)\n"
    "  --program-text FILE\n"
    "                 print the whole text the library compiles for kernel file\n"
    "                 FILE (e.g. flash_fwd.cl: the shared texts, its prelude,\n"
    "                 the file), as scripts that compile the kernels with other\n"
    "                 compilers need it, and nothing else\n"
    "  --grid G       with --profile KEY: the programs the planner builds for that\n"
    "                 profile over a grid of problems (every head_dim bucket,\n"
    "                 batch x heads x length, Nq x GQA group, decode rows 1-16,\n"
    "                 paged caches, every type, mask and pass), as --programs\n"
    "                 prints them plus the first problem that built each; counts\n"
    "                 on stderr. G: full, each distinct program once; cover, one\n"
    "                 per tiling (options less the feature hooks WINDOW, SOFTCAP,\n"
    "                 ALIBI, PACK_GQA, PAGED, SPLIT_KV, MERGE_LAST_SPLIT), the one\n"
    "                 with the most hooks on; ci, cover over a smaller grid with\n"
    "                 each decision boundary. The shape options are ignored\n"
    "\n"
    "Exit status: 0 when the devices were listed, 1 when there is none, 2 when\n"
    "the command line, the shape or the profile is wrong.\n";

const char *info_usage(void) { return usage; }

int info_parse(int argc, char **argv, info_options *o, char *why, size_t why_len) {
  memset(o, 0, sizeof *o);
  o->batch = 1;
  o->heads = 16;
  o->seqlen = 4096;
  o->dtype = FCL_DTYPE_F32;
  o->wgmma_reps = 8192;
  if (why && why_len) why[0] = '\0';
  char reason[FCLU_WHY_LEN];
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    struct {
      const char *name;
      size_t *slot;
    } const sizes[] = {{"--batch", &o->batch},       {"--heads", &o->heads},
                       {"--heads-kv", &o->heads_kv}, {"--seqlen", &o->seqlen},
                       {"--seqlen-k", &o->seqlen_k}, {"--head-dim", &o->head_dim},
                       {"--head-dim-v", &o->head_dim_v}};
    size_t *slot = NULL;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k)
      if (!strcmp(a, sizes[k].name)) slot = sizes[k].slot;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return INFO_PARSE_HELP;
    if (!strcmp(a, "--version")) return INFO_PARSE_VERSION;
    if (!strcmp(a, "--causal")) {
      o->causal = 1;
      continue;
    }
    if (!strcmp(a, "--batch-invariant")) {
      o->batch_invariant = 1;
      continue;
    }
    if (!strcmp(a, "--shuffle")) {
      static const char *const kinds[] = {"none", "ptx", "intel", "amd"};
      const char *v = i + 1 < argc ? argv[++i] : "";
      int kind = -1;
      for (int k = 0; k < 4; ++k)
        if (!strcmp(v, kinds[k])) kind = k;
      if (kind < 0) {
        snprintf(why, why_len, "--shuffle needs none, ptx, intel or amd, not '%s'", v);
        return INFO_PARSE_ERROR;
      }
      o->shuffle = kind + 1;
      continue;
    }
    if (!strcmp(a, "--wgmma-probe")) {
      o->wgmma_probe = 1;
      continue;
    }
    if (!strcmp(a, "--wgmma-reps")) {
      uint64_t reps;
      if (i + 1 >= argc ||
          fclu_parse_u64(argv[i + 1], 0, 1u << 24, &reps, reason, sizeof reason) != 0) {
        snprintf(why, why_len, "--wgmma-reps needs 0 to %u%s%s", 1u << 24,
                 i + 1 < argc ? ": " : "", i + 1 < argc ? reason : "");
        return INFO_PARSE_ERROR;
      }
      ++i;
      o->wgmma_reps = (unsigned)reps;
      continue;
    }
    if (!strcmp(a, "--programs")) {
      o->programs = 1;
      continue;
    }
    if (!strcmp(a, "--kernel")) {
      if (i + 1 >= argc) {
        snprintf(why, why_len, "%s needs a value", a);
        return INFO_PARSE_ERROR;
      }
      unsigned kind;
      if (fclu_parse_kernel(argv[++i], &kind, why, why_len) != 0) return INFO_PARSE_ERROR;
      o->hint.kernel = kind;
      continue;
    }
    if (!strcmp(a, "--splits")) {
      uint64_t splits;
      if (i + 1 >= argc ||
          fclu_parse_u64(argv[i + 1], 0, FCL_MAX_SPLITS, &splits, reason, sizeof reason) != 0) {
        snprintf(why, why_len, "--splits needs 0 to %d%s%s", FCL_MAX_SPLITS,
                 i + 1 < argc ? ": " : "", i + 1 < argc ? reason : "");
        return INFO_PARSE_ERROR;
      }
      ++i;
      o->hint.splits = (unsigned)splits;
      continue;
    }
    struct {
      const char *name, *what;
      const char **slot;
    } const strings[] = {{"--profile", "a value", &o->profile},
                         {"--program-text", "a kernel file", &o->program_text},
                         {"--grid", "full, cover or ci", &o->grid},
                         {"--ptx-unmark", "a PTX file", &o->ptx_unmark}};
    int taken = 0;
    for (size_t k = 0; k < sizeof strings / sizeof strings[0] && !taken; ++k) {
      if (strcmp(a, strings[k].name)) continue;
      if (i + 1 >= argc) {
        snprintf(why, why_len, "%s needs %s", a, strings[k].what);
        return INFO_PARSE_ERROR;
      }
      *strings[k].slot = argv[++i];
      taken = 1;
    }
    if (taken) continue;
    if (!slot && strcmp(a, "--dtype")) {
      snprintf(why, why_len, "unknown option '%s'", a);
      return INFO_PARSE_ERROR;
    }
    if (i + 1 >= argc) {
      snprintf(why, why_len, "%s needs a value", a);
      return INFO_PARSE_ERROR;
    }
    const char *value = argv[++i];
    uint64_t v;
    if (!slot) {
      if (fclu_parse_dtype(value, &o->dtype, reason, sizeof reason) == 0) continue;
    } else if (fclu_parse_u64(value, 1, SIZE_MAX, &v, reason, sizeof reason) == 0) {
      *slot = (size_t)v;
      continue;
    }
    snprintf(why, why_len, "%s: %s", a, reason);
    return INFO_PARSE_ERROR;
  }
  if (o->grid && strcmp(o->grid, "full") && strcmp(o->grid, "cover") && strcmp(o->grid, "ci")) {
    snprintf(why, why_len, "--grid needs full, cover or ci, not '%s'", o->grid);
    return INFO_PARSE_ERROR;
  }
  if (o->grid && (!o->profile || !strcmp(o->profile, "all") || !strcmp(o->profile, "list"))) {
    snprintf(why, why_len, "--grid needs --profile KEY (one profile)");
    return INFO_PARSE_ERROR;
  }
  return INFO_PARSE_RUN;
}

int info_descs(const info_options *o, fcl_attention_desc out[2]) {
  const size_t dims[2] = {64, 128};
  const int n = o->head_dim ? 1 : 2;
  for (int k = 0; k < n; ++k) {
    fcl_attention_desc_init(&out[k], o->batch, o->heads, o->heads_kv ? o->heads_kv : o->heads,
                            o->seqlen, o->seqlen_k ? o->seqlen_k : o->seqlen,
                            o->head_dim ? o->head_dim : dims[k]);
    out[k].causal = o->causal;
    out[k].dtype = o->dtype;
    out[k].batch_invariant = o->batch_invariant;
    out[k].head_dim_v = o->head_dim_v;
  }
  return n;
}
