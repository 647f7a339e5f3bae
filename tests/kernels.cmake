# CPU kernels: quantization formats, thread pool, matmul (engineer "kernels").
pagoda_test(unit/test_quants.cpp unit pagoda_kernels_cpu)
pagoda_test(unit/test_thread_pool.cpp unit pagoda_kernels_cpu)
pagoda_test(unit/test_matmul.cpp unit pagoda_kernels_cpu)
