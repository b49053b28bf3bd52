/*
 * grid.c — flashcl-info --grid: every distinct program the planner builds
 * for a profile over a grid of problems that spans its decisions (the
 * head_dim buckets, the work-group and key-tile choices of batch x heads x
 * length, packing and splitting of Nq x GQA group, the decode rows, pages
 * that cap tiles, every storage type, mask and pass), each printed once
 * with the first problem that built it. scripts/vendor-check.sh compiles
 * them; docs/design.md ("Every planned kernel, compiled") lists the grid.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcl.h"
#include "info.h"

/* The programs kept: an open-addressed map from a program's class (its
 * file and options, or with --grid cover and ci those options less the
 * hooks below) to its line and the hooks it has on, in order of arrival. */
typedef struct entry {
  char *key, *line;
  int hooks;
} entry;

typedef struct program_map {
  entry *slots;
  size_t *order;  /* slots by arrival */
  size_t cap, count;
} program_map;

static unsigned long long fnv1a(const char *s) {
  unsigned long long h = 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static char *copy(const char *s) {
  const size_t len = strlen(s) + 1;
  char *c = malloc(len);
  return c ? memcpy(c, s, len) : NULL;
}

/* Keeps `line` for `key` unless one with as many hooks or more is kept.
 * @return 0, or -1 out of memory. */
static int map_keep(program_map *m, const char *key, const char *line, int hooks) {
  if (2 * (m->count + 1) > m->cap) {
    const size_t cap = m->cap ? 2 * m->cap : 1024;
    entry *slots = calloc(cap, sizeof *slots);
    size_t *order = calloc(cap, sizeof *order);
    if (!slots || !order) return free(slots), free(order), -1;
    for (size_t i = 0; i < m->count; ++i) {
      const entry *e = &m->slots[m->order[i]];
      size_t j = fnv1a(e->key) & (cap - 1);
      while (slots[j].key) j = (j + 1) & (cap - 1);
      slots[j] = *e;
      order[i] = j;
    }
    free(m->slots), free(m->order);
    m->slots = slots, m->order = order, m->cap = cap;
  }
  size_t j = fnv1a(key) & (m->cap - 1);
  for (; m->slots[j].key; j = (j + 1) & (m->cap - 1)) {
    entry *e = &m->slots[j];
    if (strcmp(e->key, key)) continue;
    if (hooks <= e->hooks) return 0;
    char *c = copy(line);
    if (!c) return -1;
    free(e->line);
    e->line = c, e->hooks = hooks;
    return 0;
  }
  entry e = {copy(key), copy(line), hooks};
  if (!e.key || !e.line) return free(e.key), free(e.line), -1;
  m->slots[j] = e;
  m->order[m->count++] = j;
  return 0;
}

static void map_free(program_map *m) {
  for (size_t i = 0; i < m->count; ++i)
    free(m->slots[m->order[i]].key), free(m->slots[m->order[i]].line);
  free(m->slots), free(m->order);
}

/* The hooks of common.cl a program may have on that change its index
 * arithmetic and score terms but not its tiling (docs/design.md, "Feature
 * hooks"), with their weights: a class's program is the one with the most
 * on, as the most registers. */
static const struct {
  const char *name;
  int weight;  /* per unit of the value, or once where "=1"-like */
} hooks[] = {{"WINDOW", 1}, {"SOFTCAP", 1}, {"ALIBI", 1},  {"PACK_GQA", 0},
             {"PAGED", 1},  {"SPLIT_KV", 1}, {"MERGE_LAST_SPLIT", 1}};

/* The options less the hooks (into `out`), and the hooks' weight. */
static int strip_hooks(const char *options, char *out, size_t len) {
  int weight = 0;
  size_t n = 0;
  out[0] = '\0';
  for (const char *s = options; *s;) {
    const char *end = strchr(s, ' ');
    const size_t w = end ? (size_t)(end - s) : strlen(s);
    int hook = 0;
    for (size_t h = 0; h < sizeof hooks / sizeof hooks[0] && !hook; ++h) {
      const size_t k = strlen(hooks[h].name);
      if (w > k + 3 && !strncmp(s, "-D", 2) && !strncmp(s + 2, hooks[h].name, k) &&
          s[2 + k] == '=') {
        const long v = strtol(s + 3 + k, NULL, 10);
        weight += hooks[h].weight ? hooks[h].weight * (int)v : v > 1;
        hook = 1;
      }
    }
    if (!hook && n + w + 2 < len) {
      memcpy(out + n, s, w);
      n += w;
      out[n++] = ' ';
      out[n] = '\0';
    }
    s += w;
    while (*s == ' ') ++s;
  }
  return weight;
}

/* The score transforms each problem of the grid is built with: the masks
 * (WINDOW 0, 1, 2), and soft-capping and ALiBi, each on one mask. */
typedef struct transform {
  const char *name;
  int causal, window_left, softcap, alibi;
} transform;

static const transform transforms[] = {
    {"", 0, -1, 0, 0},        {"causal", 1, -1, 0, 0},  {"window", 0, 128, 0, 0},
    {"causal softcap", 1, -1, 1, 0}, {"alibi", 0, -1, 0, 1},
};

/* One grid: what each axis takes. Lists end with 0. */
typedef struct grid_axes {
  size_t dims[80];          /* head_dim */
  size_t prefill_bh[12][2]; /* batch, heads_q of the prefill shapes */
  size_t prefill_n[16];     /* seqlen (q = k) */
  size_t groups[8];         /* heads_q / heads_kv */
  size_t short_nq[24];      /* seqlen_q of the short (decode, speculative) forwards */
  size_t short_bkv[6][2];   /* batch, heads_kv of those */
  size_t short_nk[6];       /* their seqlen_k */
  size_t pages[8];          /* page_size of paged forwards */
  size_t paged_nq[6];       /* their seqlen_q */
  int transforms;           /* how many of transforms[] */
} grid_axes;

/* The full grid: every head_dim a multiple of 4 (the decode kernel's
 * padding depends on it) and a few that are not (no vec4 loads). */
static void full_axes(grid_axes *g) {
  memset(g, 0, sizeof *g);
  size_t n = 0;
  for (size_t d = 8; d <= 256; d += 8) g->dims[n++] = d;
  const size_t odd[] = {4, 12, 20, 36, 52, 68, 84, 100, 116, 132, 148, 164, 180, 196, 212,
                        228, 244, 252, 30, 90, 130, 250};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; ++i) g->dims[n++] = odd[i];
  const size_t bh[][2] = {{1, 1}, {1, 4}, {1, 8}, {1, 16}, {2, 16}, {4, 32},
                          {8, 32}, {16, 64}, {64, 32}};
  memcpy(g->prefill_bh, bh, sizeof bh);
  const size_t pn[] = {16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 32768};
  memcpy(g->prefill_n, pn, sizeof pn);
  const size_t gr[] = {1, 2, 4, 8, 16};
  memcpy(g->groups, gr, sizeof gr);
  for (size_t q = 1; q <= 16; ++q) g->short_nq[q - 1] = q;
  const size_t sq[] = {24, 32, 48, 64};
  memcpy(g->short_nq + 16, sq, sizeof sq);
  const size_t bkv[][2] = {{1, 1}, {1, 8}, {8, 8}, {64, 8}};
  memcpy(g->short_bkv, bkv, sizeof bkv);
  const size_t nk[] = {512, 4096, 32768};
  memcpy(g->short_nk, nk, sizeof nk);
  const size_t pages[] = {16, 32, 48, 64, 128, 256};
  memcpy(g->pages, pages, sizeof pages);
  const size_t pq[] = {1, 4, 16, 64, 512};
  memcpy(g->paged_nq, pq, sizeof pq);
  g->transforms = (int)(sizeof transforms / sizeof transforms[0]);
}

/* CI's grid: each decision boundary of the full grid, fewer points
 * between them (one head_dim per bucket, and the decode paddings). */
static void ci_axes(grid_axes *g) {
  full_axes(g);
  const size_t dims[] = {16, 32, 64, 80, 96, 128, 160, 192, 224, 256, 40, 120, 90};
  memset(g->dims, 0, sizeof g->dims);
  memcpy(g->dims, dims, sizeof dims);
  const size_t bh[][2] = {{1, 1}, {1, 8}, {1, 16}, {4, 32}, {16, 64}};
  memset(g->prefill_bh, 0, sizeof g->prefill_bh);
  memcpy(g->prefill_bh, bh, sizeof bh);
  const size_t pn[] = {16, 128, 1024, 2048, 8192};
  memset(g->prefill_n, 0, sizeof g->prefill_n);
  memcpy(g->prefill_n, pn, sizeof pn);
  const size_t gr[] = {1, 4, 8};
  memset(g->groups, 0, sizeof g->groups);
  memcpy(g->groups, gr, sizeof gr);
  const size_t sq[] = {1, 2, 3, 4, 5, 8, 9, 16, 32, 64};
  memset(g->short_nq, 0, sizeof g->short_nq);
  memcpy(g->short_nq, sq, sizeof sq);
  const size_t nk[] = {4096, 32768};
  memset(g->short_nk, 0, sizeof g->short_nk);
  memcpy(g->short_nk, nk, sizeof nk);
  const size_t pages[] = {16, 48, 64, 256};
  memset(g->pages, 0, sizeof g->pages);
  memcpy(g->pages, pages, sizeof pages);
  g->transforms = 3;  /* the masks; soft-capping and ALiBi change few registers */
}

typedef struct walk {
  const fcl_device_limits *limits;
  int by_class;  /* one program per class (cover, ci), not per option string */
  program_map programs;
  size_t problems, plans, failed, distinct;
  int oom;
} walk;

/* The programs of both passes (the forward alone where `forward_only`) of
 * one problem, each kept as its class says. */
static void visit(walk *w, const fcl_attention_desc *d, int forward_only, const char *what) {
  ++w->problems;
  for (int p = 0; p < (forward_only ? 1 : 2); ++p) {
    const fcl_pass pass = p ? FCL_PASS_BACKWARD : FCL_PASS_FORWARD;
    fcl_program_info programs[FCL_MAX_PASS_PROGRAMS];
    unsigned n = 0;
    char why[256];
    if (fcl_flash_programs(w->limits, d, pass, programs, &n, why, sizeof why) != FCL_SUCCESS) {
      ++w->failed;  /* a problem the device cannot run: no program */
      continue;
    }
    ++w->plans;
    for (unsigned i = 0; i < n; ++i) {
      const fcl_program_info *pr = &programs[i];
      char key[1300], stripped[1024], line[2048];
      const int weight = strip_hooks(pr->options, stripped, sizeof stripped);
      snprintf(key, sizeof key, "%s %s", pr->file, w->by_class ? stripped : pr->options);
      snprintf(line, sizeof line,
               "program\t%s\t%s\t%s\t%s%s%s\t%zu\t%u\t%s\t%s B%zu H%zu/%zu N%zu/%zu d%zu %s%s%s",
               p ? "backward" : "forward", pr->file, pr->prelude ? pr->prelude : "-",
               pr->kernels[0], pr->kernels[1] ? "," : "", pr->kernels[1] ? pr->kernels[1] : "",
               pr->local_bytes, pr->wg_size, pr->options, p ? "bwd" : "fwd", d->batch,
               d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim,
               fcl_dtype_name(d->dtype), *what ? " " : "", what);
      if (map_keep(&w->programs, key, line, weight) != 0) w->oom = 1;
      if (w->by_class) {  /* count the option strings too */
        snprintf(key, sizeof key, "\1%s %s", pr->file, pr->options);
        const size_t before = w->programs.count;
        if (map_keep(&w->programs, key, "", 0) != 0) w->oom = 1;
        w->distinct += w->programs.count - before;
      }
    }
  }
}

/* A problem of the grid with a transform applied. */
static void make(fcl_attention_desc *d, size_t b, size_t hq, size_t hkv, size_t nq, size_t nk,
                 size_t dim, fcl_dtype t, const transform *x) {
  fcl_attention_desc_init(d, b, hq, hkv, nq, nk, dim);
  d->dtype = t;
  d->causal = x->causal;
  d->window_left = x->window_left;
  if (x->window_left >= 0) d->window_right = 0;
  d->softcap = x->softcap ? 30.0f : 0.0f;
  d->alibi_slopes = x->alibi ? (cl_mem)d : NULL;  /* planned, never read */
}

int info_grid(const info_options *opts, const fcl_device_limits *limits) {
  grid_axes g;
  if (!strcmp(opts->grid, "ci")) ci_axes(&g);
  else full_axes(&g);
  walk w = {.limits = limits, .by_class = strcmp(opts->grid, "full") != 0};
  static const fcl_dtype types[] = {FCL_DTYPE_F32, FCL_DTYPE_F16, FCL_DTYPE_BF16};
  fcl_attention_desc d;
  for (size_t di = 0; g.dims[di]; ++di)
    for (int ti = 0; ti < 3; ++ti)
      for (int xi = 0; xi < g.transforms; ++xi) {
        const size_t dim = g.dims[di];
        const fcl_dtype t = types[ti];
        const transform *x = &transforms[xi];
        char what[64];
        /* prefill: batch x heads x length, with and without GQA */
        for (size_t s = 0; g.prefill_bh[s][0]; ++s)
          for (size_t n = 0; g.prefill_n[n]; ++n)
            for (size_t k = 0; g.groups[k]; ++k) {
              const size_t hq = g.prefill_bh[s][1], group = g.groups[k];
              if (hq % group) continue;
              make(&d, g.prefill_bh[s][0], hq, hq / group, g.prefill_n[n], g.prefill_n[n], dim,
                   t, x);
              visit(&w, &d, 0, x->name);
            }
        /* short forwards: Nq x group packed, split over long caches */
        for (size_t s = 0; g.short_bkv[s][0]; ++s)
          for (size_t q = 0; g.short_nq[q]; ++q)
            for (size_t k = 0; g.groups[k]; ++k)
              for (size_t n = 0; g.short_nk[n]; ++n) {
                const size_t hkv = g.short_bkv[s][1];
                make(&d, g.short_bkv[s][0], hkv * g.groups[k], hkv, g.short_nq[q],
                     g.short_nk[n], dim, t, x);
                visit(&w, &d, 1, x->name);
              }
        /* paged caches: the PAGED programs (tiles spanning pages) */
        for (size_t p = 0; g.pages[p]; ++p)
          for (size_t q = 0; g.paged_nq[q]; ++q)
            for (size_t k = 0; g.groups[k]; ++k) {
              const size_t nk = 8192;
              make(&d, 2, 8 * g.groups[k], 8, g.paged_nq[q], nk, dim, t, x);
              d.block_table = (cl_mem)&d;  /* planned, never read */
              d.page_size = g.pages[p];
              d.pages_per_seq = (nk + g.pages[p] - 1) / g.pages[p];
              d.num_pages = 2 * d.pages_per_seq;
              snprintf(what, sizeof what, "%s%spaged %zu", x->name, *x->name ? " " : "",
                       g.pages[p]);
              visit(&w, &d, 1, what);
            }
      }
  size_t kept = 0;
  for (size_t i = 0; i < w.programs.count; ++i) {
    const entry *e = &w.programs.slots[w.programs.order[i]];
    if (e->key[0] == '\1') continue;
    printf("%s\n", e->line);
    ++kept;
  }
  fprintf(stderr,
          "flashcl-info: grid %s: %zu problems, %zu plans, %zu not plannable, %zu distinct "
          "programs, %zu listed\n",
          opts->grid, w.problems, w.plans, w.failed, w.by_class ? w.distinct : kept, kept);
  map_free(&w.programs);
  if (w.oom) {
    fprintf(stderr, "flashcl-info: out of memory listing the grid\n");
    return 1;
  }
  return 0;
}
