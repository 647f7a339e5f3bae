# Tokenizer, pre-tokenizers, detokenizer and stop strings (engineer D).
pagoda_test(unit/test_tokenizer_vocab.cpp unit pagoda_tokenizer)
pagoda_test(unit/test_tokenizer.cpp unit pagoda_tokenizer)
pagoda_test(unit/test_pretokenize.cpp unit pagoda_tokenizer)
pagoda_test(unit/test_detokenizer.cpp unit pagoda_tokenizer)

# Encoding speed on English-like text; a plain program, not a test:
#   build/bench_tokenizer [vocab.gguf ...]
add_executable(bench_tokenizer bench_tokenizer.cpp)
target_link_libraries(bench_tokenizer PRIVATE pagoda_tokenizer)
target_include_directories(bench_tokenizer PRIVATE ${CMAKE_SOURCE_DIR})
target_compile_definitions(bench_tokenizer PRIVATE PAGODA_TESTDATA_DIR="${PAGODA_TESTDATA_DIR}")

# `pagoda tokenize` over a real vocabulary (runs the built binary).
pagoda_test(e2e/test_tokenize_cli.cpp e2e)
add_dependencies(test_tokenize_cli pagoda)
