# GGUF reader/writer, model metadata and make-model (engineer "gguf").
pagoda_test(unit/test_gguf.cpp unit pagoda_gguf)
pagoda_test(unit/test_gguf_corruption.cpp unit pagoda_gguf)
pagoda_test(unit/test_model_config.cpp unit pagoda_gguf)
