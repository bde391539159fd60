// The one header a generated kernel includes. It gives the same device API on a GPU (NVRTC
// or nvcc: CUDA headers, inline PTX) and on a CPU (g++ against the emulation in ncdc_emu*.h),
// so one .cu source is compiled for both. See docs/cpu-backend.md for every function.
#pragma once
#ifndef NCDC_RUNTIME_CUH
#define NCDC_RUNTIME_CUH

#if defined(__CUDACC__)
#define NCDC_GPU 1
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#if defined(__CUDACC_RTC__)
// NVRTC has no host standard headers; these widths are the same on every CUDA target.
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned short uint16_t;
typedef unsigned char uint8_t;
#else
#include <cstdint>
#endif
#define NCDC_DEVICE __device__ __forceinline__
// Nothing to export on a GPU: the launcher finds the kernel by its extern "C" name.
#define NCDC_EXPORT_KERNEL(name) static_assert(true, "")
#else
#include "ncdc_emu.h"
#include "ncdc_emu_types.h"
#include "ncdc_emu_intrinsics.h"
#define NCDC_DEVICE inline
#endif

#include "ncdc_math.cuh"
#include "ncdc_memory.cuh"
#include "ncdc_mma.cuh"

#endif  // NCDC_RUNTIME_CUH
