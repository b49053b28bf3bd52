/*
 * plan_decode.c — the tilings of the two decode forwards
 * (cl/flash_fwd_decode.cl, cl/flash_fwd_decode_mma.cl). Pure, like plan.c,
 * which calls it with the packed problem (a block's rows are slots of a
 * group's heads).
 *
 * Which (fcl__decode_kernel): the one on matrix instructions where they
 * run natively, for 16-bit types up to head_dim 128 and 16 rows; else the
 * SIMT one on GPUs (decode_suits says why). Its tiling:
 *   - rows: the block's, the packed rows rounded up to a power of two, at
 *     most FCL_DECODE_MAX_ROWS; every work-item keeps q and an accumulator
 *     slice for each;
 *   - a work-item's slice of head_dim, ELEMS: 8 elements up to 4 rows,
 *     else 4, so that q and the accumulator stay within 64 floats; the
 *     work-items sharing a key are head_dim / ELEMS rounded up to a power
 *     of two, at most 32 (a warp, whose shuffles sum the dot products);
 *   - the work-group: 128 work-items (key groups of 8 at d = 128), halved
 *     while its local memory does not fit; each key group takes
 *     decode_keys_per_group keys a step (4; 2 on Intel; 1 on RDNA at
 *     8 rows of slices of 8), loaded a step
 *     ahead, so block_k = groups x that;
 *   - the splits (plan.c's choose_splits), aimed at the work-groups a
 *     compute unit holds (one wave), at most DECODE_MAX_SPLITS:
 *     a decode launch has few blocks, and only every compute unit busy
 *     keeps the memory busy; and how they merge (choose_merge): in the
 *     split launch where the kernel's local state holds a block's LSEs.
 * The one on matrix instructions has the MMA layout: each warp holds the
 * block's rows (a power of two up to 16) and takes 16 keys of a step;
 * four warps (block_k 64; a paged cache's page is looked up a warp's 16
 * keys at a time, so any allowed page size takes it); the same split rule,
 * aimed at 3 work-groups a compute unit for a quantized cache with at most
 * 8 rows a block.
 * Beyond 128 columns (DeepSeek's 576 and 512) its wide kernel
 * (cl/flash_fwd_decode_wide.cl): blocks of 32 rows (16 where fewer), eight
 * warps sharing tiles of 128 keys, each scoring 16 of them and owning an
 * eighth of O's columns.
 */
#include "common.h"
#include "errors.h"
#include "problem.h"
#include "rules.h"

#define DECODE_WG 128u
#define DECODE_MAX_LANES 32u
#define DECODE_MAX_GROUPS 32u   /* block_k = groups x 4 within the tiles' 128 keys */
#define DECODE_MMA_WARPS 4u     /* block_k = 64 */
#define DECODE_MMA_MAX_HEAD_DIM FCL_DECODE_MMA_NARROW_MAX
/* the wide kernel's warps, each owning an eighth of O (64 of 512 columns):
 * scripts/ptxas-check.sh's proxy put 4 warps (a quarter each) at 255
 * registers and a spill, 8 at 174 and none; 4 remain a hint */
#define DECODE_WIDE_WARPS 8u

/* The decode kernel's register cost model on RDNA (AMD's wave32 chips: a
 * lane's 256 VGPRs, no AGPRs): a lane's q and accumulator slices of the
 * block's rows and a step's V and next step's K, 2 x (rows + keys) x
 * slice floats. clang-15 for gfx1030 (scripts/vendor-check.sh --grid
 * cover) spilled at 8 rows of slices of 8 with 4 keys (192 floats; 256
 * VGPRs and 296-356 bytes a lane) and with 2 (160; f32 20 bytes, f16 and
 * bf16 none at 256 VGPRs), not with 1 (144; 223-227 VGPRs), nor at 4
 * rows with 4 keys (128; 213). 0 elsewhere: CDNA's 512 VGPRs and AGPRs
 * took 192. */
#define DECODE_RDNA_FLOATS 144u
static unsigned decode_rdna_floats(const fcl_device_limits *limits, const fcl_plan *plan,
                                   unsigned keys) {
  if (limits->vendor != FCL_VENDOR_AMD || limits->sub_group_size >= 64) return 0;
  const unsigned slice = plan->head_dim_padded / plan->threads_per_row;
  return 2 * (plan->block_q + keys) * slice;
}

/* Keys a key group takes each step. The kernel holds a step's V and the
 * next step's K at once; with 4 keys Intel's compiler spilled that (IGC
 * 1.0.12504, 256 GRF: 192-352 bytes on dg2, 128 on pvc, d 128) and with 2
 * it did not. Beyond a bucket of 256 (DeepSeek's 576 in a bucket of 640:
 * 20 columns a lane, q in local memory, at most DECODE_WIDE_MAX_ROWS
 * rows), 1 key, 2 on Intel: at 4 rows, 128 work-items, clang-15 for gfx940
 * used 256 VGPRs and no spill at 1 (an SGPR spill at 2), and IGC for dg2
 * spilled 192 bytes at 1 and none at 2 (scripts/vendor-compile.sh). On
 * RDNA, halved while the cost model above is over its budget. */
static unsigned decode_keys_per_group(const fcl_device_limits *limits, const fcl_plan *plan) {
  if (FCL_DECODE_Q_IN_LOCAL(plan->head_dim_padded))
    return limits->vendor == FCL_VENDOR_INTEL ? 2u : 1u;
  if (limits->vendor == FCL_VENDOR_INTEL) return 2u;
  unsigned keys = 4;
  while (keys > 1 && decode_rdna_floats(limits, plan, keys) > DECODE_RDNA_FLOATS) keys /= 2;
  return keys;
}

/* The SIMT decode kernel's register model on Intel's GPUs, in private
 * floats of a work-item: q and an accumulator slice for each row, four
 * slices for each key a step takes (the step's V and the next step's K,
 * and their loads in flight), and a score for each row and key:
 * 2 x slice x rows + 4 x slice x keys + rows x keys, up to a bucket of 256.
 * The budget is the most IGC 1.0.12504 compiled without spilling on both
 * chips (scripts/vendor-check.sh --grid cover, and each tiling again
 * without its hooks): 8 rows of 4 columns at 2 keys (cost 112) spilled on
 * the Max 1550 (960 bytes) and the Arc A770 (32-64), 4 rows of 8 at 2
 * keys (136) on the Max (192), 8 rows of 8 at 2 keys (208) on both and at
 * 1 (168) on the Max (384); 8 rows of 4 at 1 key (88) and 4 rows of 8 at
 * 1 (100) on neither. The planner takes one key a step, then fewer rows a
 * block, while over. */
#define DECODE_FLOATS_INTEL 104u

/* The budget above, 0 where the planner has no model (other vendors). */
static unsigned decode_register_budget(const fcl_device_limits *limits) {
  return limits->vendor == FCL_VENDOR_INTEL && limits->is_gpu ? DECODE_FLOATS_INTEL : 0;
}

static unsigned decode_cost(size_t slice, unsigned rows, unsigned keys) {
  return (unsigned)(2 * slice * rows + 4 * slice * keys + rows * keys);
}

/* A block's rows beyond a bucket of 256: an accumulator of 4 rows x 20
 * columns a lane; at 8 rows both compilers above spilled (gfx940 into 195
 * AGPRs, dg2 1856 bytes). */
#define DECODE_WIDE_MAX_ROWS 4u

static unsigned pow2_at_least(size_t x) {
  unsigned p = 1;
  while (p < x) p *= 2;
  return p;
}

/* The SIMT kernel: GPUs only. On NVIDIA it was measured (docs/design.md,
 * "The rules, measured"); on AMD and Intel it is chosen by their compilers' figures
 * (scripts/vendor-check.sh: no spill, 26 KiB of local memory and occupancy
 * 2 on MI300X, 5 on RX 7900 XTX, where the SIMT split forward has 43 and
 * 39 KiB and occupancy 1), not timed. On PoCL its local-memory sums made it
 * 3-4x slower than the SIMT kernel. */
static int decode_suits(const fcl_device_limits *limits, const fcl__shape *sh,
                        size_t packed_rows) {
  if (fcl__decode_only(sh)) return sh->vec4;  /* on any device, CPUs too, in blocks of rows */
  return limits->is_gpu && sh->vec4 && packed_rows <= FCL_DECODE_MAX_ROWS;
}

int fcl__decode_only(const fcl__shape *sh) {
  return sh->desc.head_dim > FCL_MAX_TILED_HEAD_DIM || sh->head_dim_v > FCL_MAX_TILED_HEAD_DIM;
}

/* Whether a shape takes the matrix decode's wide kernel: a width past
 * 128 (flash_fwd_decode_wide.cl). */
static int decode_wide(const fcl__shape *sh) {
  return sh->desc.head_dim > DECODE_MMA_MAX_HEAD_DIM || sh->head_dim_v > DECODE_MMA_MAX_HEAD_DIM;
}

/* Where the matrix instructions run natively, for the types they multiply
 * as stored (f32 would pay 3xTF32 and the splitting of every K and V
 * element, which the SIMT kernel's f32 streams without); faster than the
 * SIMT kernel there (docs/design.md, "The rules, measured"). */
static int decode_mma_suits(const fcl_device_limits *limits, const fcl__shape *sh,
                            size_t packed_rows) {
  if (!fcl__mma_native(limits) || sh->desc.dtype == FCL_DTYPE_F32 || !sh->vec4) return 0;
  /* the wide kernel, in blocks of rows: the planner's for the widths only
   * the decode kernels take (DeepSeek's, measured); between 128 and 256, a
   * hint's (the SIMT decode kernel's rows otherwise) */
  if (decode_wide(sh)) return fcl__decode_only(sh) && !sh->kv_quant;
  return packed_rows <= FCL_DECODE_MMA_MAX_ROWS;
}

unsigned fcl__decode_kernel(const fcl_device_limits *limits, const fcl__shape *sh,
                            size_t packed_rows) {
  if (decode_mma_suits(limits, sh, packed_rows)) return FCL_FLASH_KERNEL_DECODE_MMA;
  if (decode_suits(limits, sh, packed_rows)) return FCL_FLASH_KERNEL_DECODE;
  return FCL_FLASH_KERNEL_AUTO;
}

int fcl__decode_plan_wide(const fcl_plan *plan) {
  const unsigned v = fcl__plan_head_dim_v(plan);
  return plan->kernel == FCL_FLASH_KERNEL_DECODE_MMA &&
         (v > plan->head_dim_padded ? v : plan->head_dim_padded) > DECODE_MMA_MAX_HEAD_DIM;
}

/* int4's K scaled after: B 8 x 8k in 0.062 ms against 0.069, B 32 x 8k
 * 0.232 against 0.270, B 1 x 32k 0.036 against 0.039 (H100, v35, capped at
 * 168 registers). int8's lost while its load unit was withheld (0.099
 * against 0.080, v35); told it, on rows of 128 columns (the quad's), it
 * gains: 0.066-0.067 against 0.068, B 32 x 8k 0.239-0.240 against
 * 0.249-0.252, B 1 x 32k 0.040 against 0.042 (H100, v38). */
unsigned fcl__decode_k_scale_after(const fcl_attention_desc *desc, const fcl_plan *plan) {
  /* on every device (emulated too): one kernel text wherever a plan runs it */
  const int fits = desc->kv_dtype == FCL_KV_Q4_0 ||
                   (desc->kv_dtype == FCL_KV_Q8_0 && plan->head_dim_padded == 128);
  return plan->kernel == FCL_FLASH_KERNEL_DECODE_MMA && fits && desc->dtype == FCL_DTYPE_F16 &&
                 !plan->decode_untransposed && !fcl__decode_plan_wide(plan)
             ? 2u
             : 0u;
}

/* The wide kernel at 128 registers spills 80 bytes a lane and runs two
 * work-groups a multiprocessor: B 64 x 8k at (576, 512) in 0.99 ms
 * against 1.19, B 8 x 8k 0.153 against 0.188 (H100, v35; K's chunks of 2
 * there, 4 spilling more: cl/flash_fwd_decode_wide.cl). */
#define DECODE_WIDE_REG_CAP 128u
/* K scaled after takes 181 registers a lane uncapped (two work-groups a
 * multiprocessor); held to 168, three, as the other block forms. */
#define DECODE_K_SCALE_AFTER_REG_CAP 168u

unsigned fcl__decode_reg_cap(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                             const fcl_plan *plan) {
  if (!limits->nvidia_ptx || plan->kernel != FCL_FLASH_KERNEL_DECODE_MMA) return 0;
  if (fcl__decode_plan_wide(plan))
    return plan->wg_size == 32 * DECODE_WIDE_WARPS ? DECODE_WIDE_REG_CAP : 0;
  return fcl__decode_k_scale_after(desc, plan) ? DECODE_K_SCALE_AFTER_REG_CAP : 0;
}

/* flash_fwd_decode_mma.cl: Q in the storage type, the warps' states, and in
 * emulation the products' scratch and a float per work-item (mma.cl); the
 * wide kernel's, traits.h. */
static size_t decode_mma_local_bytes(const fcl_plan *plan, int emulate) {
  if (fcl__decode_plan_wide(plan))
    return FCL_DECODE_WIDE_LOCAL_BYTES((size_t)plan->head_dim_padded, (size_t)plan->block_q,
                                       (size_t)plan->wg_size / 32, emulate);
  return FCL_DECODE_MMA_LOCAL_BYTES((size_t)plan->head_dim_padded, (size_t)plan->block_q,
                                    (size_t)plan->wg_size / 32, emulate);
}

size_t fcl__decode_state_row_floats(const fcl_plan *plan) {
  if (fcl__decode_plan_wide(plan)) return FCL_DECODE_WIDE_STAGE_FLOATS((size_t)plan->head_dim_padded);
  const size_t groups =
      plan->wg_size / (plan->kernel == FCL_FLASH_KERNEL_DECODE_MMA ? 32 : plan->threads_per_row);
  return groups * FCL_DECODE_STATE_FLOATS((size_t)plan->head_dim_padded);
}

size_t fcl__flash_decode_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits) {
  if (plan->kernel == FCL_FLASH_KERNEL_DECODE_MMA)
    return decode_mma_local_bytes(plan, !fcl__mma_native(limits));
  const int sum_by_shuffle = fcl__sums_by_shuffle(limits, plan->wg_size, plan->threads_per_row);
  const size_t hd = plan->head_dim_padded, q_bytes = 4 * (size_t)plan->block_q * hd;
  /* IGC gives each __local array a multiple of 32 bytes (ocloc, dg2 and
   * pvc), AMD's compiler and PoCL what it declares: the SIMT decode's q
   * (rows x head_dim floats, where it has an array of its own) is the one
   * array of the kernel that can be 16 bytes short of that (one float4 at
   * d 4: 1,056 bytes, not 1,040). */
  const size_t q_pad = limits->vendor == FCL_VENDOR_INTEL && limits->is_gpu &&
                               !FCL_DECODE_Q_IN_LOCAL(hd) ? (32 - q_bytes % 32) % 32 : 0;
  return FCL_DECODE_LOCAL_BYTES(hd, (size_t)plan->block_q, (size_t)plan->block_k,
                                (size_t)plan->wg_size, (size_t)plan->threads_per_row,
                                sum_by_shuffle) + q_pad;
}

fcl_status fcl__plan_forward_decode(const fcl_device_limits *limits, const fcl__shape *sh,
                                    const fcl_attention_desc *desc, const fcl_plan *hint,
                                    fcl_plan *out, char *why, size_t why_len) {
  FCL_WHY_IF(!sh->vec4, FCL_ERROR_UNSUPPORTED,
             "the decode kernel loads groups of four elements: it needs head_dim (%zu), "
             "head_dim_v (%zu) and every tensor's offset and strides to be multiples of 4 "
             "elements",
             desc->head_dim, sh->head_dim_v);
  /* A width no other family takes runs here whatever its rows, in blocks
   * of at most FCL_DECODE_MAX_ROWS (DECODE_WIDE_MAX_ROWS beyond a bucket of
   * 256): DeepSeek's 128 query heads of one KV head. */
  const int only = fcl__decode_only(sh);
  FCL_WHY_IF(!only && desc->seqlen_q > FCL_DECODE_MAX_ROWS, FCL_ERROR_UNSUPPORTED,
             "the decode kernel holds at most FCL_DECODE_MAX_ROWS = %d rows a block; this "
             "forward has %zu (seqlen_q times the packed heads)",
             FCL_DECODE_MAX_ROWS, desc->seqlen_q);
  fcl_plan plan = {.kernel = FCL_FLASH_KERNEL_DECODE};
  plan.block_q = pow2_at_least(desc->seqlen_q ? desc->seqlen_q : 1);
  /* q, K and V share a lane's slice of the wider of the two widths */
  const size_t width = desc->head_dim > sh->head_dim_v ? desc->head_dim : sh->head_dim_v;
  const unsigned max_rows =
      width > FCL_MAX_TILED_HEAD_DIM ? DECODE_WIDE_MAX_ROWS : FCL_DECODE_MAX_ROWS;
  if (plan.block_q > max_rows) plan.block_q = max_rows;
  const unsigned most_floats = decode_register_budget(limits);
  unsigned lanes, keys;
  for (;;) {
    /* batch-invariant: 8 whatever the rows, which the call's longest query
     * sequence sets (the lanes sharing a key order a row's sums); 4 there
     * measured 1.5-2.7x slower on PoCL (docs/performance.md) */
    const size_t elems = plan.block_q <= 4 || desc->batch_invariant ? 8 : 4;
    lanes = pow2_at_least((width + elems - 1) / elems);
    if (lanes > DECODE_MAX_LANES) lanes = DECODE_MAX_LANES;
    const size_t slice = ((width + lanes - 1) / lanes + 3) / 4 * 4;
    plan.threads_per_row = lanes;
    plan.head_dim_padded = (unsigned)(slice * lanes);
    keys = decode_keys_per_group(limits, &plan);
    /* the register model (decode_register_budget), where it reaches */
    if (!most_floats || FCL_DECODE_Q_IN_LOCAL(plan.head_dim_padded) ||
        (hint && hint->rows_per_thread))
      break;
    if (decode_cost(slice, plan.block_q, keys) > most_floats) keys = 1;
    if (decode_cost(slice, plan.block_q, keys) <= most_floats || plan.block_q == 1) break;
    plan.block_q /= 2;
  }
  plan.rows_per_thread = plan.block_q;
  unsigned wg = hint && hint->wg_size ? hint->wg_size : DECODE_WG;
  if (!(hint && hint->wg_size) && wg > limits->max_work_group_size)
    wg = fcl__floor_pow2(limits->max_work_group_size);
  if (!(hint && hint->wg_size) && wg > DECODE_MAX_GROUPS * lanes) wg = DECODE_MAX_GROUPS * lanes;
  if (!(hint && hint->wg_size) && wg < lanes) wg = lanes;
  FCL_WHY_IF(wg % lanes != 0 || wg / lanes > DECODE_MAX_GROUPS, FCL_ERROR_UNSUPPORTED,
             "wg_size = %u: the decode kernel's work-group is 1 to %u key groups of %u "
             "work-items at head_dim %zu",
             wg, DECODE_MAX_GROUPS, lanes, desc->head_dim);
  FCL_WHY_IF(wg > limits->max_work_group_size, FCL_ERROR_UNSUPPORTED,
             "a work-group of %u work-items exceeds the device's limit of %zu", wg,
             limits->max_work_group_size);
  FCL_WHY_IF(hint && hint->threads_per_row && hint->threads_per_row != lanes,
             FCL_ERROR_UNSUPPORTED,
             "the decode kernel at head_dim %zu and %u rows shares each key among %u "
             "work-items, not %u",
             desc->head_dim, plan.block_q, lanes, hint->threads_per_row);
  FCL_WHY_IF(hint && hint->rows_per_thread && hint->rows_per_thread != plan.block_q,
             FCL_ERROR_UNSUPPORTED,
             "the decode kernel's work-items each hold all %u rows of a block, not %u",
             plan.block_q, hint->rows_per_thread);
  const uint64_t budget = fcl__local_budget(limits);
  for (;;) {
    plan.wg_size = wg;
    const unsigned groups = wg / lanes;
    plan.block_k = hint && hint->block_k ? hint->block_k : groups * keys;
    FCL_WHY_IF(plan.block_k % groups != 0 || plan.block_k > 128, FCL_ERROR_UNSUPPORTED,
               "block_k = %u: the decode kernel's %u key groups take equal shares of a "
               "step's keys, at most 128",
               plan.block_k, groups);
    plan.local_bytes = fcl__flash_decode_local_bytes(&plan, limits);
    if (plan.local_bytes <= budget) break;
    FCL_WHY_IF((hint && hint->wg_size) || wg / 2 < lanes, FCL_ERROR_UNSUPPORTED,
               "the decode kernel needs %zu bytes of local memory per work-group at "
               "head_dim %zu; the device allows %llu",
               plan.local_bytes, desc->head_dim, (unsigned long long)budget);
    wg /= 2;
  }
  *out = plan;
  return FCL_SUCCESS;
}

/* The wide kernel (flash_fwd_decode_wide.cl): 32-row blocks (16 where the
 * packed rows are at most 16, or where 32 do not fit local memory),
 * DECODE_WIDE_WARPS warps (4 or 8 by a hint's wg_size), 128-key tiles;
 * head_dim padded to 32, O's width to the warps' 32-column groups (and
 * head_dim to at least that). */
static fcl_status plan_forward_decode_wide(const fcl_device_limits *limits, const fcl__shape *sh,
                                           const fcl_attention_desc *desc, const fcl_plan *hint,
                                           fcl_plan *out, char *why, size_t why_len) {
  FCL_WHY_IF(sh->kv_quant, FCL_ERROR_UNSUPPORTED,
             "the decode kernel on matrix instructions reads a %s cache up to %u columns; "
             "head_dim %zu, head_dim_v %zu run on the decode kernel",
             fcl_kv_dtype_name(desc->kv_dtype), DECODE_MMA_MAX_HEAD_DIM, desc->head_dim,
             sh->head_dim_v);
  const unsigned warps = hint && hint->wg_size ? hint->wg_size / 32 : DECODE_WIDE_WARPS;
  const unsigned v_round = 32 * warps;
  FCL_WHY_IF(hint && hint->wg_size && hint->wg_size != 128 && hint->wg_size != 256,
             FCL_ERROR_UNSUPPORTED,
             "wg_size = %u: the decode kernel on matrix instructions beyond %u columns runs "
             "4 or 8 warps (128 or 256 work-items)",
             hint->wg_size, DECODE_MMA_MAX_HEAD_DIM);
  fcl_plan plan = {.kernel = FCL_FLASH_KERNEL_DECODE_MMA,
                   .block_q = desc->seqlen_q > 16 ? 32 : 16,
                   .block_k = FCL_DECODE_WIDE_BLOCK_K,
                   .threads_per_row = 4,
                   .rows_per_thread = 2,
                   .wg_size = 32 * warps};
  plan.head_dim_v_padded = (unsigned)((sh->head_dim_v + v_round - 1) / v_round * v_round);
  plan.head_dim_padded = (unsigned)((desc->head_dim + 31) / 32 * 32);
  if (plan.head_dim_padded < plan.head_dim_v_padded) plan.head_dim_padded = plan.head_dim_v_padded;
  FCL_WHY_IF(hint && ((hint->threads_per_row && hint->threads_per_row != 4) ||
                      (hint->rows_per_thread && hint->rows_per_thread != 2) ||
                      hint->tile_elem_size ||
                      (hint->block_k && hint->block_k != plan.block_k)),
             FCL_ERROR_UNSUPPORTED,
             "the decode kernel on matrix instructions beyond %u columns has the MMA layout "
             "(threads_per_row 4, rows_per_thread 2, no tiles) and tiles of %u keys",
             DECODE_MMA_MAX_HEAD_DIM, plan.block_k);
  FCL_WHY_IF(plan.wg_size > limits->max_work_group_size, FCL_ERROR_UNSUPPORTED,
             "a work-group of %u work-items exceeds the device's limit of %zu", plan.wg_size,
             limits->max_work_group_size);
  const int emulate = !fcl__mma_native(limits);
  const uint64_t budget = fcl__local_budget(limits);
  for (;;) {
    plan.local_bytes = decode_mma_local_bytes(&plan, emulate);
    if (plan.local_bytes <= budget) break;
    FCL_WHY_IF(plan.block_q == 16, FCL_ERROR_UNSUPPORTED,
               "the decode kernel on matrix instructions needs %zu bytes of local memory per "
               "work-group at head_dim %zu; the device allows %llu",
               plan.local_bytes, desc->head_dim, (unsigned long long)budget);
    plan.block_q = 16;
  }
  *out = plan;
  return FCL_SUCCESS;
}

/* The decode forward on matrix instructions: block_q rows (a power of two,
 * at most 16) in every warp, DECODE_MMA_WARPS warps each taking 16 keys of
 * a step (more were no faster), head_dim padded to whole
 * 32-column groups (a lane's V loads), halved while local memory does not
 * fit. */
fcl_status fcl__plan_forward_decode_mma(const fcl_device_limits *limits, const fcl__shape *sh,
                                        const fcl_attention_desc *desc, const fcl_plan *hint,
                                        fcl_plan *out, char *why, size_t why_len) {
  FCL_WHY_IF(desc->dtype == FCL_DTYPE_F32, FCL_ERROR_UNSUPPORTED,
             "the decode kernel on matrix instructions takes f16 and bf16 storage; f32 runs "
             "the decode kernel");
  FCL_WHY_IF(!sh->vec4, FCL_ERROR_UNSUPPORTED,
             "the decode kernel on matrix instructions loads groups of four elements: it "
             "needs head_dim (%zu), head_dim_v (%zu) and every tensor's offset and strides "
             "to be multiples of 4 elements",
             desc->head_dim, sh->head_dim_v);
  if (decode_wide(sh)) return plan_forward_decode_wide(limits, sh, desc, hint, out, why, why_len);
  FCL_WHY_IF(desc->seqlen_q > FCL_DECODE_MMA_MAX_ROWS, FCL_ERROR_UNSUPPORTED,
             "the decode kernel on matrix instructions holds at most "
             "FCL_DECODE_MMA_MAX_ROWS = %d rows a block; this forward has %zu (seqlen_q "
             "times the packed heads)",
             FCL_DECODE_MMA_MAX_ROWS, desc->seqlen_q);
  FCL_WHY_IF(hint && ((hint->threads_per_row && hint->threads_per_row != 4) ||
                      (hint->rows_per_thread && hint->rows_per_thread != 2) ||
                      hint->tile_elem_size),
             FCL_ERROR_UNSUPPORTED,
             "the decode kernel on matrix instructions has the MMA layout (threads_per_row "
             "4, rows_per_thread 2) and no tiles in local memory (tile_elem_size 0)");
  fcl_plan plan = {.kernel = FCL_FLASH_KERNEL_DECODE_MMA,
                   .block_q = pow2_at_least(desc->seqlen_q ? desc->seqlen_q : 1),
                   .threads_per_row = 4,
                   .rows_per_thread = 2,
                   .head_dim_padded = (unsigned)((desc->head_dim > sh->head_dim_v
                                                      ? desc->head_dim
                                                      : sh->head_dim_v) +
                                                 31) / 32 * 32};
  const int fixed_wg = hint && hint->wg_size;
  unsigned wg = fixed_wg ? hint->wg_size : 32 * DECODE_MMA_WARPS;
  while (!fixed_wg && wg > 32 && wg > limits->max_work_group_size) wg /= 2;
  FCL_WHY_IF(wg % 32 != 0, FCL_ERROR_UNSUPPORTED,
             "the decode kernel on matrix instructions runs whole warps: wg_size %u is not a "
             "multiple of 32",
             wg);
  FCL_WHY_IF(wg > limits->max_work_group_size, FCL_ERROR_UNSUPPORTED,
             "a work-group of %u work-items exceeds the device's limit of %zu", wg,
             limits->max_work_group_size);
  const int emulate = !fcl__mma_native(limits);
  const uint64_t budget = fcl__local_budget(limits);
  for (;;) {
    plan.wg_size = wg;
    plan.block_k = FCL_DECODE_MMA_WARP_KEYS * (wg / 32);
    plan.local_bytes = decode_mma_local_bytes(&plan, emulate);
    if (plan.local_bytes <= budget) break;
    FCL_WHY_IF(fixed_wg || wg == 32, FCL_ERROR_UNSUPPORTED,
               "the decode kernel on matrix instructions needs %zu bytes of local memory per "
               "work-group at head_dim %zu; the device allows %llu",
               plan.local_bytes, desc->head_dim, (unsigned long long)budget);
    wg /= 2;
  }
  FCL_WHY_IF(hint && hint->block_k && hint->block_k != plan.block_k, FCL_ERROR_UNSUPPORTED,
             "block_k = %u: the decode kernel on matrix instructions steps 16 keys a warp, %u "
             "for %u work-items",
             hint->block_k, plan.block_k, wg);
  *out = plan;
  return FCL_SUCCESS;
}
