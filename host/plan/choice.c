/*
 * choice.c — which plan a call runs: the context's tiling hint where one is
 * set, else the tuned plan of its bucket where it plans the problem, else
 * the rules (plan.c).
 */
#include "context.h"
#include "errors.h"
#include "problem.h"
#include "plan.h"
#include "tuning.h"

int fcl_tiling_hint_given(const fcl_plan *h) {
  return h && (h->block_k || h->wg_size || h->threads_per_row || h->rows_per_thread ||
               h->tile_elem_size || h->kernel || h->splits || h->packed_heads || h->merge ||
               h->v_stages);
}

fcl_status fcl__plan_call(fcl_context *ctx, const fcl_plan *hint, const fcl__shape *sh,
                          fcl_pass pass, fcl_plan *plan, char *why, size_t why_len) {
  const fcl_device_limits *limits = &ctx->info.limits;
  if (fcl_tiling_hint_given(hint)) return fcl__plan_shape(limits, sh, pass, hint, plan, why, why_len);
  /* A bucket's tuned plan may not suit every shape in it (a head_dim its
   * threads do not divide): the rules take those. */
  fcl_plan tuned;
  if (!sh->desc.batch_invariant /* tuned by buckets of whole calls */ &&
      fcl__tuned_plan(ctx, &sh->desc, pass, &tuned) &&
      fcl__plan_shape(limits, sh, pass, &tuned, plan, NULL, 0) == FCL_SUCCESS) {
    plan->tuned = 1;
    return FCL_SUCCESS;
  }
  return fcl__plan_shape(limits, sh, pass, NULL, plan, why, why_len);
}

fcl_status fcl_context_plan(fcl_context *ctx, const fcl_attention_desc *desc, fcl_pass pass,
                            fcl_plan *plan, char *why, size_t why_len) {
  if (!ctx || !ctx->usable) {
    fcl__say(why, why_len, "%s", ctx ? "the context was not created successfully" : "ctx is NULL");
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (why && why_len) why[0] = '\0';
  FCL_WHY_IF(!desc || !plan, FCL_ERROR_INVALID_ARGUMENT, "%s is NULL", !desc ? "desc" : "plan");
  FCL_WHY_IF(pass != FCL_PASS_FORWARD && pass != FCL_PASS_BACKWARD, FCL_ERROR_INVALID_ARGUMENT,
             "pass = %d is not an fcl_pass", (int)pass);
  fcl__shape shape;
  FCL_FORWARD_IF(fcl__check_desc_why(desc, &shape, why, why_len));
  const fcl__settings settings = fcl__context_settings(ctx);
  return fcl__plan_call(ctx, &settings.tiling_hint, &shape, pass, plan, why, why_len);
}
