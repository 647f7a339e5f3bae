# Tests of the CPU backend ops and the transformer forward (engineer "model").
pagoda_test(unit/test_cpu_ops.cpp unit pagoda_model)

# The scalar reference transformer and tiny-model writer used by the forward tests.
add_library(pagoda_test_reference STATIC unit/reference_model.cpp)
target_link_libraries(pagoda_test_reference PUBLIC pagoda_gguf)
pagoda_test(unit/test_model_forward.cpp unit pagoda_model pagoda_test_reference)

# `pagoda generate` end to end on a demo model written by `pagoda make-model`.
pagoda_test(e2e/test_generate_cli.cpp e2e Threads::Threads)
add_dependencies(test_generate_cli pagoda)

# RoPE frequency factors (rope_freqs.weight): config validation, loading, make-model's llama3
# factors (engineer "ropefreq"). make-model's CLI is compiled in, as in tests/gguf.cmake.
pagoda_test(unit/test_rope_freqs.cpp unit pagoda_model pagoda_test_reference)
target_sources(test_rope_freqs PRIVATE ${CMAKE_SOURCE_DIR}/server/cmd_make_model.cpp)

# --device selection shared by serve and generate (engine/backend_select.h).
pagoda_test(unit/test_backend_select.cpp unit pagoda_model)
