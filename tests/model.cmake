# Tests of the CPU backend ops and the transformer forward (engineer "model").
pagoda_test(unit/test_cpu_ops.cpp unit pagoda_model)
