# GPU tests (label gpu): CudaBackend and CUDA kernels against the CPU oracle. Built only with
# PAGODA_CUDA; each test passes with a "no CUDA device: skipped" warning on machines without one.
if(PAGODA_CUDA)
  pagoda_test(gpu/test_cuda_kernels.cpp gpu pagoda_model)
  pagoda_test(gpu/test_cuda_ops.cpp gpu pagoda_model)
  pagoda_test(gpu/test_cuda_attention.cpp gpu pagoda_model)
endif()
