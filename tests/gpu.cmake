# GPU tests (label gpu): CudaBackend and CUDA kernels against the CPU oracle. Built only with
# PAGODA_CUDA; each test passes with a "no CUDA device: skipped" warning on machines without one.
if(PAGODA_CUDA)
  pagoda_test(gpu/test_cuda_kernels.cpp gpu pagoda_model)
  pagoda_test(gpu/test_cuda_ops.cpp gpu pagoda_model)
  pagoda_test(gpu/test_cuda_attention.cpp gpu pagoda_model)
  pagoda_test(gpu/test_cuda_model.cpp gpu pagoda_model)
  pagoda_test(gpu/test_cuda_engine.cpp gpu pagoda_engine)
  pagoda_test(gpu/test_cuda_graphs.cpp gpu pagoda_model)

  # Decode throughput of the Model on the GPU (run by scripts/gpu-check.sh; not a test).
  add_executable(bench_cuda_decode gpu/bench_cuda_decode.cpp)
  target_link_libraries(bench_cuda_decode PRIVATE pagoda_model)
  target_include_directories(bench_cuda_decode PRIVATE ${CMAKE_SOURCE_DIR})
endif()
