/*
 * status.c — names of statuses and OpenCL error codes, and the recording of
 * a context's last error.
 */
#include "common.h"
#include "errors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *fcl_status_str(fcl_status status) {
  switch (status) {
    case FCL_SUCCESS: return "FCL_SUCCESS";
    case FCL_ERROR_INVALID_ARGUMENT: return "FCL_ERROR_INVALID_ARGUMENT";
    case FCL_ERROR_INVALID_SHAPE: return "FCL_ERROR_INVALID_SHAPE";
    case FCL_ERROR_BUFFER_TOO_SMALL: return "FCL_ERROR_BUFFER_TOO_SMALL";
    case FCL_ERROR_UNSUPPORTED: return "FCL_ERROR_UNSUPPORTED";
    case FCL_ERROR_OUT_OF_MEMORY: return "FCL_ERROR_OUT_OF_MEMORY";
    case FCL_ERROR_DEVICE_NOT_FOUND: return "FCL_ERROR_DEVICE_NOT_FOUND";
    case FCL_ERROR_BUILD_FAILED: return "FCL_ERROR_BUILD_FAILED";
    case FCL_ERROR_OPENCL: return "FCL_ERROR_OPENCL";
    case FCL_ERROR_CLBLAST: return "FCL_ERROR_CLBLAST";
  }
  return "FCL_STATUS_UNKNOWN";
}

const char *fcl__cl_error_name(cl_int err) {
  switch (err) {
#define NAME(code) \
  case code: return #code;
    NAME(CL_SUCCESS)
    NAME(CL_DEVICE_NOT_FOUND)
    NAME(CL_DEVICE_NOT_AVAILABLE)
    NAME(CL_COMPILER_NOT_AVAILABLE)
    NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    NAME(CL_OUT_OF_RESOURCES)
    NAME(CL_OUT_OF_HOST_MEMORY)
    NAME(CL_PROFILING_INFO_NOT_AVAILABLE)
    NAME(CL_MEM_COPY_OVERLAP)
    NAME(CL_IMAGE_FORMAT_MISMATCH)
    NAME(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    NAME(CL_BUILD_PROGRAM_FAILURE)
    NAME(CL_MAP_FAILURE)
    NAME(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    NAME(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    NAME(CL_COMPILE_PROGRAM_FAILURE)
    NAME(CL_LINKER_NOT_AVAILABLE)
    NAME(CL_LINK_PROGRAM_FAILURE)
    NAME(CL_DEVICE_PARTITION_FAILED)
    NAME(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
    NAME(CL_INVALID_VALUE)
    NAME(CL_INVALID_DEVICE_TYPE)
    NAME(CL_INVALID_PLATFORM)
    NAME(CL_INVALID_DEVICE)
    NAME(CL_INVALID_CONTEXT)
    NAME(CL_INVALID_QUEUE_PROPERTIES)
    NAME(CL_INVALID_COMMAND_QUEUE)
    NAME(CL_INVALID_HOST_PTR)
    NAME(CL_INVALID_MEM_OBJECT)
    NAME(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    NAME(CL_INVALID_IMAGE_SIZE)
    NAME(CL_INVALID_SAMPLER)
    NAME(CL_INVALID_BINARY)
    NAME(CL_INVALID_BUILD_OPTIONS)
    NAME(CL_INVALID_PROGRAM)
    NAME(CL_INVALID_PROGRAM_EXECUTABLE)
    NAME(CL_INVALID_KERNEL_NAME)
    NAME(CL_INVALID_KERNEL_DEFINITION)
    NAME(CL_INVALID_KERNEL)
    NAME(CL_INVALID_ARG_INDEX)
    NAME(CL_INVALID_ARG_VALUE)
    NAME(CL_INVALID_ARG_SIZE)
    NAME(CL_INVALID_KERNEL_ARGS)
    NAME(CL_INVALID_WORK_DIMENSION)
    NAME(CL_INVALID_WORK_GROUP_SIZE)
    NAME(CL_INVALID_WORK_ITEM_SIZE)
    NAME(CL_INVALID_GLOBAL_OFFSET)
    NAME(CL_INVALID_EVENT_WAIT_LIST)
    NAME(CL_INVALID_EVENT)
    NAME(CL_INVALID_OPERATION)
    NAME(CL_INVALID_GL_OBJECT)
    NAME(CL_INVALID_BUFFER_SIZE)
    NAME(CL_INVALID_MIP_LEVEL)
    NAME(CL_INVALID_GLOBAL_WORK_SIZE)
    NAME(CL_INVALID_PROPERTY)
#undef NAME
  }
  return "CL_UNKNOWN_ERROR";
}

/* ---- last errors, one per thread ---------------------------------------- */

/* A thread's last error on one context. The slot array is guarded by the
 * context's lock; a slot's text is written and read only by its thread, so
 * the pointer fcl_context_last_error() returns stays valid, whatever other
 * threads do, until that thread's next failing call on the context. */
struct fcl__error_slot {
  pthread_t thread;
  char *text;         /* inline, or heap for long messages (build logs) */
  size_t cap;
  char inline_text[512];
};

/* Longest message kept (build logs can be long; the rest is cut). */
#define FCL_ERROR_MAX 65536

static fcl_context *mutable_ctx(const fcl_context *ctx) { return (fcl_context *)ctx; }

/* The calling thread's slot; created when `create`. Caller holds the lock. */
static fcl__error_slot *thread_slot(fcl_context *ctx, int create) {
  pthread_t self = pthread_self();
  for (size_t i = 0; i < ctx->n_errors; ++i)
    if (pthread_equal(ctx->errors[i]->thread, self)) return ctx->errors[i];
  if (!create) return NULL;
  if (ctx->n_errors == ctx->cap_errors) {
    size_t cap = ctx->cap_errors ? 2 * ctx->cap_errors : 4;
    /* Plain allocations, not the injectable wrappers: recording a failure
     * must not itself be a failure point the tests count. */
    fcl__error_slot **grown = realloc(ctx->errors, cap * sizeof *grown);
    if (!grown) return NULL;
    ctx->errors = grown;
    ctx->cap_errors = cap;
  }
  fcl__error_slot *slot = malloc(sizeof *slot);
  if (!slot) return NULL;
  slot->thread = self;
  slot->text = slot->inline_text;
  slot->cap = sizeof slot->inline_text;
  slot->text[0] = '\0';
  ctx->errors[ctx->n_errors++] = slot;
  return slot;
}

fcl_status fcl__fail(fcl_context *ctx, fcl_status status, const char *fmt, ...) {
  if (!ctx) return status;
  pthread_mutex_lock(&ctx->lock);
  fcl__error_slot *slot = thread_slot(ctx, 1);
  pthread_mutex_unlock(&ctx->lock);
  if (!slot) return status;  /* out of memory: the message is lost */
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(slot->text, slot->cap, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n >= slot->cap && slot->cap < FCL_ERROR_MAX) {
    size_t cap = (size_t)n + 1 < FCL_ERROR_MAX ? (size_t)n + 1 : FCL_ERROR_MAX;
    char *big = malloc(cap);
    if (big) {
      if (slot->text != slot->inline_text) free(slot->text);
      slot->text = big;
      slot->cap = cap;
      va_start(ap, fmt);
      vsnprintf(slot->text, slot->cap, fmt, ap);
      va_end(ap);
    }
  }
  return status;
}

void fcl__clear_error(fcl_context *ctx) {
  pthread_mutex_lock(&ctx->lock);
  fcl__error_slot *slot = thread_slot(ctx, 0);
  pthread_mutex_unlock(&ctx->lock);
  if (slot) slot->text[0] = '\0';
}

void fcl__errors_release(fcl_context *ctx) {
  for (size_t i = 0; i < ctx->n_errors; ++i) {
    if (ctx->errors[i]->text != ctx->errors[i]->inline_text) free(ctx->errors[i]->text);
    free(ctx->errors[i]);
  }
  free(ctx->errors);
  ctx->errors = NULL;
  ctx->n_errors = ctx->cap_errors = 0;
}

void fcl__say(char *why, size_t why_len, const char *fmt, ...) {
  if (!why || !why_len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_len, fmt, ap);
  va_end(ap);
}

fcl_status fcl__cl_fail(fcl_context *ctx, cl_int err, const char *what) {
  fcl_status status = FCL_ERROR_OPENCL;
  if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY)
    status = FCL_ERROR_OUT_OF_MEMORY;
  return fcl__fail(ctx, status, "%s failed: %s (%d)", what,
                   fcl__cl_error_name(err), (int)err);
}

const char *fcl_context_last_error(const fcl_context *ctx) {
  if (!ctx) return "no context (NULL)";
  fcl_context *c = mutable_ctx(ctx);
  pthread_mutex_lock(&c->lock);
  fcl__error_slot *slot = thread_slot(c, 0);
  pthread_mutex_unlock(&c->lock);
  return slot ? slot->text : "";
}
