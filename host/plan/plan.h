/*
 * plan.h — the planner (plan.c): a validated problem planned, and a call's plan.
 */
#ifndef FCL_PLAN_H
#define FCL_PLAN_H

#include "common.h"
#include "problem.h"

/** The planner on a validated problem: what fcl__plan_flash does after
 *  validating its descriptor. */
fcl_status fcl__plan_shape(const fcl_device_limits *limits, const fcl__shape *sh, fcl_pass pass,
                           const fcl_plan *hint, fcl_plan *out, char *why, size_t why_len);
/** The planner, with optional overrides: the nonzero fields of `hint`
 *  replace its choices (fcl_context_set_flash_tiling). */
fcl_status fcl__plan_flash(const fcl_device_limits *limits,
                           const fcl_attention_desc *desc, fcl_pass pass,
                           const fcl_plan *hint, fcl_plan *out, char *why,
                           size_t why_len);
/** fcl__plan_flash, also writing the validated problem it planned
 *  (`shape`, on success only). */
fcl_status fcl__plan_flash_shape(const fcl_device_limits *limits,
                                 const fcl_attention_desc *desc, fcl_pass pass,
                                 const fcl_plan *hint, fcl_plan *out, fcl__shape *shape,
                                 char *why, size_t why_len);
/** A call's plan (plan.c): the context's tiling hint where one is set;
 *  else the tuned plan of its bucket where it plans the problem
 *  (plan->tuned = 1); else the rules. */
fcl_status fcl__plan_call(fcl_context *ctx, const fcl_plan *hint, const fcl__shape *sh,
                          fcl_pass pass, fcl_plan *plan, char *why, size_t why_len);

#endif
