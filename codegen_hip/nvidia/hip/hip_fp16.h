// wavefuse NVIDIA compatibility: HIP's half type and conversions are CUDA's.
#pragma once
#include <cuda_fp16.h>
