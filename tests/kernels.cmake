# CPU kernels: quantization formats, thread pool, matmul (engineer "kernels").
pagoda_test(unit/test_quants.cpp unit pagoda_kernels_cpu)
