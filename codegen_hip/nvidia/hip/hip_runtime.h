// wavefuse NVIDIA compatibility: lets the exported HIP sources build with nvcc unchanged.
// nvcc -I <this dir's parent> -arch=sm_90 -x cu main.hip *.hip -o app     (warpSize is 32)
// Only what wavefuse's kernels and harness use is mapped; shuffles use the full-warp mask,
// as the IR's wave operations assume every lane takes part.
#pragma once
#include <cuda_runtime.h>

#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemset cudaMemset
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipEvent_t cudaEvent_t
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipStream_t cudaStream_t
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamCaptureModeGlobal cudaStreamCaptureModeGlobal
#define hipStreamEndCapture cudaStreamEndCapture
#define hipGraph_t cudaGraph_t
#define hipGraphExec_t cudaGraphExec_t
#define hipGraphNode_t cudaGraphNode_t
#define hipGraphLaunch cudaGraphLaunch
#define hipGraphExecDestroy cudaGraphExecDestroy
#define hipGraphDestroy cudaGraphDestroy

// HIP keeps the five-argument instantiate (error node, log buffer); CUDA 12 dropped it for
// (exec, graph, flags), so this is a function, not a name mapping.
static inline cudaError_t hipGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                              cudaGraphNode_t* error_node, char* log,
                                              size_t log_size) {
  (void)error_node; (void)log; (void)log_size;
  return cudaGraphInstantiate(exec, graph, 0);
}

#ifdef __CUDACC__
template <typename T>
__device__ __forceinline__ T __shfl_xor(T v, int lane_mask, int width = warpSize) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
}
template <typename T>
__device__ __forceinline__ T __shfl_down(T v, unsigned int delta, int width = warpSize) {
  return __shfl_down_sync(0xffffffffu, v, delta, width);
}
#endif
