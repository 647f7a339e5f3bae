# GGUF reader/writer, model metadata and make-model (engineer "gguf").
pagoda_test(unit/test_gguf.cpp unit pagoda_gguf)
pagoda_test(unit/test_gguf_corruption.cpp unit pagoda_gguf)
pagoda_test(unit/test_model_config.cpp unit pagoda_gguf)
pagoda_test(unit/test_make_model.cpp unit pagoda_gguf)
# The CLI front end is compiled in directly so the test does not need the whole server.
target_sources(test_make_model PRIVATE ${CMAKE_SOURCE_DIR}/server/cmd_make_model.cpp)
