/*
 * devices.c — the OpenCL devices: every platform's devices listed, and each
 * described by the limits flashcl plans with (its vendor, local memory,
 * work-groups, sub-groups and their shuffles, extensions).
 */
#include "context.h"
#include "errors.h"
#include "resources.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The ICD loader's answer when no platform is installed (cl_khr_icd). */
#define FCL_PLATFORM_NOT_FOUND_KHR (-1001)

/* Device enumeration and context creation run one at a time in the
 * process: PoCL 3.1 initialises its devices lazily, and three threads
 * creating contexts at once crashed in clGetDeviceInfo(CL_DEVICE_NAME) or
 * had clGetDeviceIDs report CL_DEVICE_NOT_FOUND for a platform that has a
 * device. Held for the whole listing or creation, never while a context
 * runs work. */
static pthread_mutex_t enumeration_lock = PTHREAD_MUTEX_INITIALIZER;

void fcl__query_string(cl_device_id dev, cl_device_info what, char *out, size_t size) {
  out[0] = '\0';
  if (clGetDeviceInfo(dev, what, size, out, NULL) != CL_SUCCESS) out[0] = '\0';
  out[size - 1] = '\0';
}

static int has_extension(const char *extensions, const char *name) {
  size_t len = strlen(name);
  for (const char *p = extensions; (p = strstr(p, name)) != NULL; p += len)
    if ((p == extensions || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0'))
      return 1;
  return 0;
}

/* The vendor, from its PCI id, and the width its hardware runs work-items
 * in lockstep, each from the vendor's own query (0 where there is none). */
static void read_vendor(cl_device_id dev, fcl_device_limits *lim) {
  cl_uint id = 0, u32 = 0;
  lim->vendor = FCL_VENDOR_OTHER;
  if (lim->is_gpu && clGetDeviceInfo(dev, CL_DEVICE_VENDOR_ID, sizeof id, &id, NULL) == CL_SUCCESS)
    lim->vendor = id == 0x10de ? FCL_VENDOR_NVIDIA
                  : id == 0x1002 ? FCL_VENDOR_AMD
                  : id == 0x8086 ? FCL_VENDOR_INTEL
                                 : FCL_VENDOR_OTHER;
  lim->sub_group_size = 0;
  if (lim->vendor == FCL_VENDOR_NVIDIA) {
    /* CL_DEVICE_WARP_SIZE_NV */
    if (clGetDeviceInfo(dev, 0x4003, sizeof u32, &u32, NULL) == CL_SUCCESS) lim->sub_group_size = u32;
  } else if (lim->vendor == FCL_VENDOR_AMD) {
    /* CL_DEVICE_WAVEFRONT_WIDTH_AMD */
    if (clGetDeviceInfo(dev, 0x4043, sizeof u32, &u32, NULL) == CL_SUCCESS) lim->sub_group_size = u32;
  } else if (lim->vendor == FCL_VENDOR_INTEL) {
    /* CL_DEVICE_SUB_GROUP_SIZES_INTEL: the narrowest, whose lanes get the
     * most registers (the planner's budget, plan.c) */
    size_t sizes[8] = {0}, bytes = 0;
    if (clGetDeviceInfo(dev, 0x4108, sizeof sizes, sizes, &bytes) == CL_SUCCESS)
      for (size_t i = 0; i < bytes / sizeof sizes[0] && i < 8; ++i)
        if (sizes[i] && (!lim->sub_group_size || sizes[i] < lim->sub_group_size))
          lim->sub_group_size = (unsigned)sizes[i];
  }
}

/* Fills `out`; fails only when the extension list cannot be allocated
 * (the limits would be wrong, not merely incomplete). `ctx` (may be NULL)
 * is where injected failures are counted and messages go. */
fcl_status fcl__describe_device(fcl_context *ctx, cl_platform_id platform,
                           cl_device_id dev, unsigned pi, unsigned di,
                           fcl_device_info *out) {
  memset(out, 0, sizeof *out);
  out->platform_index = pi;
  out->device_index = di;
  fcl__query_string(dev, CL_DEVICE_NAME, out->name, sizeof out->name);
  fcl__query_string(dev, CL_DEVICE_VENDOR, out->vendor, sizeof out->vendor);
  fcl__query_string(dev, CL_DEVICE_VERSION, out->version, sizeof out->version);
  fcl__query_string(dev, CL_DRIVER_VERSION, out->driver, sizeof out->driver);
  if (clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof out->platform,
                        out->platform, NULL) != CL_SUCCESS)
    out->platform[0] = '\0';
  out->platform[sizeof out->platform - 1] = '\0';

  fcl_device_limits *lim = &out->limits;
  cl_ulong u64 = 0;
  cl_uint u32 = 0;
  size_t sz = 0;
  cl_device_type type = 0;
  if (clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof u64, &u64, NULL) == CL_SUCCESS)
    lim->local_mem_bytes = u64;
  if (clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof u64, &u64, NULL) == CL_SUCCESS)
    lim->global_mem_bytes = u64;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof u64, &u64, NULL) == CL_SUCCESS)
    lim->max_alloc_bytes = u64;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof sz, &sz, NULL) == CL_SUCCESS)
    lim->max_work_group_size = sz;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof u32, &u32, NULL) == CL_SUCCESS)
    lim->compute_units = u32;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof u32, &u32, NULL) == CL_SUCCESS)
    out->max_clock_mhz = u32;
  if (clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS)
    lim->is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;

  size_t ext_len = 0;
  int amd_compiler = 0;
  if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len) == CL_SUCCESS &&
      ext_len > 0) {
    char *ext = fcl__malloc(ctx, ext_len + 1);
    if (!ext)
      return fcl__fail(ctx, FCL_ERROR_OUT_OF_MEMORY,
                       "out of host memory reading the extensions of %s", out->name);
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL) == CL_SUCCESS) {
      ext[ext_len] = '\0';
      lim->has_fp16 = has_extension(ext, "cl_khr_fp16");
      lim->has_fp64 = has_extension(ext, "cl_khr_fp64");
      lim->has_int64_atomics = has_extension(ext, "cl_khr_int64_base_atomics");
      /* cl_nv_device_attribute_query marks NVIDIA's own driver, whose
       * compiler accepts inline PTX (checked on an H200). */
      lim->nvidia_ptx = has_extension(ext, "cl_nv_device_attribute_query");
      /* AMD's own runtime (ROCm, and the driver before it) compiles with
       * LLVM's amdgcn target, whose builtins the AMD shuffle uses; Mesa's
       * drivers do not have this extension. */
      amd_compiler = has_extension(ext, "cl_amd_media_ops");
    }
    fcl__free(ext);
  }
  if (lim->nvidia_ptx) {
    /* CL_DEVICE_COMPUTE_CAPABILITY_{MAJOR,MINOR}_NV of that extension */
    cl_uint major = 0, minor = 0;
    if (clGetDeviceInfo(dev, 0x4000, sizeof major, &major, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(dev, 0x4001, sizeof minor, &minor, NULL) == CL_SUCCESS)
      lim->nvidia_sm = major * 10 + minor;
  }
  read_vendor(dev, lim);
  /* Intel's shuffles are not used: IGC spilled the SIMT kernels far more
   * with them than with local-memory sums (docs/performance.md, Vendors). */
  lim->shuffle = lim->nvidia_ptx                                   ? FCL_SHUFFLE_NVIDIA_PTX
                 : lim->vendor == FCL_VENDOR_AMD && amd_compiler ? FCL_SHUFFLE_AMD
                                                                 : FCL_SHUFFLE_NONE;
  if (lim->shuffle != FCL_SHUFFLE_NVIDIA_PTX && !lim->sub_group_size)
    lim->shuffle = FCL_SHUFFLE_NONE;  /* a width to plan with is needed */
  return FCL_SUCCESS;
}

cl_int fcl__each_device(fcl__device_visitor visit, void *user) {
  cl_uint n_platforms = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &n_platforms);
  if (err == FCL_PLATFORM_NOT_FOUND_KHR || n_platforms == 0) return CL_SUCCESS;
  if (err != CL_SUCCESS) return err;
  cl_platform_id platforms[64];
  if (n_platforms > 64) n_platforms = 64;
  if ((err = clGetPlatformIDs(n_platforms, platforms, NULL)) != CL_SUCCESS) return err;
  for (cl_uint p = 0; p < n_platforms; ++p) {
    cl_uint n_devices = 0;
    /* A platform without devices says CL_DEVICE_NOT_FOUND; any other
     * failure would silently hide devices, so it is the caller's error. */
    err = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &n_devices);
    if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && n_devices == 0)) continue;
    if (err != CL_SUCCESS) return err;
    cl_device_id devices[64];
    if (n_devices > 64) n_devices = 64;
    err = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, n_devices, devices, NULL);
    if (err != CL_SUCCESS) return err;
    for (cl_uint d = 0; d < n_devices; ++d)
      if (visit(platforms[p], devices[d], p, d, user)) return CL_SUCCESS;
  }
  return CL_SUCCESS;
}

typedef struct list_state {
  fcl_device_info *out;
  size_t capacity, count;
  fcl_status status;
} list_state;

static int list_visit(cl_platform_id platform, cl_device_id dev, unsigned pi,
                      unsigned di, void *user) {
  list_state *st = user;
  if (st->count < st->capacity)
    st->status = fcl__describe_device(NULL, platform, dev, pi, di, &st->out[st->count]);
  st->count++;
  return st->status != FCL_SUCCESS;
}

fcl_status fcl_devices(fcl_device_info *out, size_t capacity, size_t *count) {
  if (!count) return FCL_ERROR_INVALID_ARGUMENT;
  *count = 0;
  if (!out && capacity) return FCL_ERROR_INVALID_ARGUMENT;
  list_state st = {out, capacity, 0, FCL_SUCCESS};
  fcl__devices_lock(1);
  cl_int err = fcl__each_device(list_visit, &st);
  fcl__devices_lock(0);
  if (st.status != FCL_SUCCESS) return st.status;
  if (err != CL_SUCCESS) return err == CL_OUT_OF_HOST_MEMORY ? FCL_ERROR_OUT_OF_MEMORY
                                                             : FCL_ERROR_OPENCL;
  *count = st.count;
  return FCL_SUCCESS;
}

void fcl__devices_lock(int hold) {
  if (hold)
    pthread_mutex_lock(&enumeration_lock);
  else
    pthread_mutex_unlock(&enumeration_lock);
}
