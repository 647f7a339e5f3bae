# Tests of the CPU backend ops and the transformer forward (engineer "model").
pagoda_test(unit/test_cpu_ops.cpp unit pagoda_model)

# The scalar reference transformer and tiny-model writer used by the forward tests.
add_library(pagoda_test_reference STATIC unit/reference_model.cpp)
target_link_libraries(pagoda_test_reference PUBLIC pagoda_gguf)
pagoda_test(unit/test_model_forward.cpp unit pagoda_model pagoda_test_reference)

# `pagoda generate` end to end on a demo model written by `pagoda make-model`.
pagoda_test(e2e/test_generate_cli.cpp e2e Threads::Threads)
add_dependencies(test_generate_cli pagoda)
