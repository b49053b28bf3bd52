/*
 * profiles.c — devices nobody here has, described from their vendors'
 * documentation and the limits their OpenCL drivers publicly report, so
 * that the planner's choices for them can be listed (flashcl-info
 * --profile) and compiled by the vendors' offline compilers
 * (scripts/vendor-check.sh).
 */
#include "common.h"

#define GIB (1ull << 30)

static const fcl_device_profile profiles[] = {
    {"arc-a770", "ocloc -device dg2",
     "Intel Arc A770 16 GB: 32 Xe-cores of 16 vector engines (Intel's product brief); "
     "Intel's compute-runtime reports each vector engine as a compute unit (512), "
     "work-groups of up to 1024, 64 KiB of shared local memory, sub-groups of 8, 16 and 32, "
     "allocations up to 4 GiB, cl_khr_fp16 and no cl_khr_fp64",
     {.name = "Intel(R) Arc(TM) A770 Graphics (profile)",
      .vendor = "Intel(R) Corporation",
      .platform = "flashcl profile",
      .limits = {.local_mem_bytes = 64 << 10,
                 .max_work_group_size = 1024,
                 .compute_units = 512,
                 .global_mem_bytes = 16 * GIB,
                 .max_alloc_bytes = 4 * GIB,
                 .is_gpu = 1,
                 .has_fp16 = 1,
                 .has_int64_atomics = 1,
                 .vendor = FCL_VENDOR_INTEL,
                 .sub_group_size = 8}}},
    {"max-1550", "ocloc -device pvc",
     "Intel Data Center GPU Max 1550: 128 Xe-cores of 8 vector engines in two stacks "
     "(Intel's product brief), 1024 compute units as compute-runtime counts them, "
     "work-groups of up to 1024, 128 KiB of shared local memory, sub-groups of 16 and 32, "
     "128 GiB HBM2e, allocations up to 4 GiB, fp16 and fp64",
     {.name = "Intel(R) Data Center GPU Max 1550 (profile)",
      .vendor = "Intel(R) Corporation",
      .platform = "flashcl profile",
      .limits = {.local_mem_bytes = 128 << 10,
                 .max_work_group_size = 1024,
                 .compute_units = 1024,
                 .global_mem_bytes = 128 * GIB,
                 .max_alloc_bytes = 4 * GIB,
                 .is_gpu = 1,
                 .has_fp16 = 1,
                 .has_fp64 = 1,
                 .has_int64_atomics = 1,
                 .vendor = FCL_VENDOR_INTEL,
                 .sub_group_size = 16}}},
    {"mi300x", "clang-15 -target amdgcn-amd-amdhsa -mcpu=gfx940",
     "AMD Instinct MI300X (CDNA 3, gfx942; gfx940 is the nearest target clang 15 knows): "
     "304 compute units and 192 GB HBM3 (AMD's data sheet), 64 KiB of LDS per compute unit "
     "and 64-wide wavefronts (AMD's CDNA 3 ISA guide), work-groups of up to 256 as ROCm's "
     "OpenCL reports by default; the largest allocation is taken as the whole memory",
     {.name = "AMD Instinct MI300X (profile)",
      .vendor = "Advanced Micro Devices, Inc.",
      .platform = "flashcl profile",
      .limits = {.local_mem_bytes = 64 << 10,
                 .max_work_group_size = 256,
                 .compute_units = 304,
                 .global_mem_bytes = 192 * GIB,
                 .max_alloc_bytes = 192 * GIB,
                 .is_gpu = 1,
                 .has_fp16 = 1,
                 .has_fp64 = 1,
                 .has_int64_atomics = 1,
                 .vendor = FCL_VENDOR_AMD,
                 .sub_group_size = 64,
                 .shuffle = FCL_SHUFFLE_AMD}}},
    {"rx-7900-xtx", "clang-15 -target amdgcn-amd-amdhsa -mcpu=gfx1030",
     "AMD Radeon RX 7900 XTX (RDNA 3, gfx1100; compiled for gfx1030, since Debian 12's "
     "device libraries have no gfx11 bitcode): 96 compute units in 48 work-group processors and 24 GB "
     "(AMD's specifications), which ROCm's OpenCL reports as 48 compute units; 64 KiB of "
     "LDS, 32-wide wavefronts, work-groups of up to 256 (ROCm's OpenCL default); the "
     "largest allocation is taken as the whole memory",
     {.name = "AMD Radeon RX 7900 XTX (profile)",
      .vendor = "Advanced Micro Devices, Inc.",
      .platform = "flashcl profile",
      .limits = {.local_mem_bytes = 64 << 10,
                 .max_work_group_size = 256,
                 .compute_units = 48,
                 .global_mem_bytes = 24 * GIB,
                 .max_alloc_bytes = 24 * GIB,
                 .is_gpu = 1,
                 .has_fp16 = 1,
                 .has_fp64 = 1,
                 .has_int64_atomics = 1,
                 .vendor = FCL_VENDOR_AMD,
                 .sub_group_size = 32,
                 .shuffle = FCL_SHUFFLE_AMD}}},
};

const fcl_device_profile *fcl_device_profiles(size_t *count) {
  if (count) *count = sizeof profiles / sizeof profiles[0];
  return profiles;
}
