/*
 * resources.h — every allocation, buffer and enqueue, through wrappers that tests can make fail (resources.c).
 */
#ifndef FCL_RESOURCES_H
#define FCL_RESOURCES_H

#include "common.h"
#include "context.h"

/* What an injected failure simulates, and the status each becomes:
 *   HOST_ALLOC    malloc returning NULL, or an OpenCL object (context, queue,
 *                 program, kernel) failing with CL_OUT_OF_HOST_MEMORY
 *                                               -> FCL_ERROR_OUT_OF_MEMORY
 *   DEVICE_ALLOC  clCreateBuffer failing with
 *                 CL_MEM_OBJECT_ALLOCATION_FAILURE -> FCL_ERROR_OUT_OF_MEMORY
 *   ENQUEUE       an enqueue (kernel, copy, fill, read, marker) failing with
 *                 CL_OUT_OF_RESOURCES           -> FCL_ERROR_OPENCL
 *                 a CLBlast call failing with
 *                 CLBlastOpenCLOutOfResources   -> FCL_ERROR_CLBLAST */
enum {
  FCL_INJECT_HOST_ALLOC = 1u << 0,
  FCL_INJECT_DEVICE_ALLOC = 1u << 1,
  FCL_INJECT_ENQUEUE = 1u << 2,
};

/** Test hook: the `n`-th (1-based) subsequent operation of a kind in `mask`
 *  fails as if the resource were exhausted; n = 0 disarms. With a context,
 *  the operations counted are those on that context, from any thread; with
 *  ctx NULL, those of the calling thread (on any context, or none: device
 *  listing, context creation). A context's own setting takes precedence.
 *  @return how many operations of those kinds ran since it was armed. */
long fcl__inject_failures(fcl_context *ctx, unsigned mask, long n);

/** 1 when an injected failure of `kind` is due now (ctx may be NULL). */
int fcl__injected(fcl_context *ctx, unsigned kind);

void *fcl__malloc(fcl_context *ctx, size_t bytes);
void *fcl__calloc(fcl_context *ctx, size_t count, size_t size);
void *fcl__realloc(fcl_context *ctx, void *p, size_t bytes);
void fcl__free(void *p);

/** Creates a device buffer; on failure records the detail and returns NULL
 *  with *status set (FCL_ERROR_OUT_OF_MEMORY or FCL_ERROR_OPENCL). */
cl_mem fcl__buffer(fcl_context *ctx, cl_mem_flags flags, size_t bytes,
                   const char *what, fcl_status *status);
void fcl__release_mem(cl_mem *mem);
/** clRetainMemObject on one of those, counted as a buffer until released. */
cl_int fcl__retain_mem(cl_mem mem);
/** Test hook: device buffers of the library's own (fcl__buffer and its
 *  kin) not yet released, over every context of the process. */
long fcl__live_buffers(void);
/** A read-only device buffer holding a copy of `bytes` of host memory;
 *  as fcl__buffer on failure. */
cl_mem fcl__upload(fcl_context *ctx, const void *host, size_t bytes, const char *what,
                   fcl_status *status);
/** A read-write device buffer of `bytes` zeros; as fcl__buffer on failure. */
cl_mem fcl__zeroed_buffer(fcl_context *ctx, size_t bytes, const char *what,
                          fcl_status *status);

/** Enqueues a 1–3 dimensional NDRange; `name` labels errors. */
fcl_status fcl__launch(fcl_context *ctx, cl_kernel kernel, const char *name,
                       cl_uint dims, const size_t *global, const size_t *local);
/** Enqueues `items` work-items in work-groups of `wg` (halved to the
 *  device's limit), the last group padded: for kernels that skip items
 *  past the end. */
fcl_status fcl__launch_items(fcl_context *ctx, cl_kernel kernel, const char *name, size_t items,
                             size_t wg);

/** Enqueued copies, fills, reads and markers; `what` labels errors. */
fcl_status fcl__copy(fcl_context *ctx, cl_mem from, cl_mem to, size_t bytes,
                     const char *what);
fcl_status fcl__fill(fcl_context *ctx, cl_mem mem, const void *pattern,
                     size_t pattern_size, size_t bytes, const char *what);
fcl_status fcl__read(fcl_context *ctx, cl_mem mem, void *out, size_t bytes,
                     const char *what);
/** `rows` rows of `row_bytes` from byte `col` of each `pitch`-byte row of
 *  mem into out, packed; blocking. */
fcl_status fcl__read_rect(fcl_context *ctx, cl_mem mem, size_t pitch, size_t col,
                          size_t row_bytes, size_t rows, void *out, const char *what);
fcl_status fcl__marker(fcl_context *ctx, cl_event *event, const char *what);

/** OpenCL objects the library creates for itself. */
fcl_status fcl__create_program(fcl_context *ctx, cl_uint count,
                               const char **texts, cl_program *program);
/** clBuildProgram; returns the OpenCL code, injected failures included. */
cl_int fcl__build_program(fcl_context *ctx, cl_program program,
                          const char *options);
fcl_status fcl__create_kernel(fcl_context *ctx, cl_program program,
                              const char *name, cl_kernel *kernel);

/** Sets kernel arguments from a list of (size, pointer) pairs. */
typedef struct fcl__arg {
  size_t size;
  const void *value;
} fcl__arg;
#define FCL_ARG(x) ((fcl__arg){sizeof(x), &(x)})
#define FCL_ARG_LOCAL(bytes) ((fcl__arg){(bytes), NULL})
/** Sets `count` arguments, after checking that the built kernel takes
 *  exactly that many (CL_KERNEL_NUM_ARGS): FCL_ERROR_BUILD_FAILED if not. */
fcl_status fcl__set_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                         const fcl__arg *args, cl_uint count);

#endif
