# Structured output (issue 11): grammar core tests and benchmark. `ctest -R structured`.
pagoda_test(unit/structured/test_structured_gbnf.cpp unit pagoda_structured pagoda_tokenizer)
pagoda_test(unit/structured/test_structured_matcher.cpp unit pagoda_structured pagoda_tokenizer)
# Mask == brute force: synthetic vocabulary + threads; SPM vocabularies; BPE vocabularies.
# Each bounds its own time (about 50 s of wall clock on the shared 2-core machine).
pagoda_test(unit/structured/test_structured_mask.cpp unit pagoda_structured pagoda_tokenizer)
pagoda_test(unit/structured/test_structured_mask_spm.cpp unit pagoda_structured pagoda_tokenizer)
pagoda_test(unit/structured/test_structured_mask_bpe.cpp unit pagoda_structured pagoda_tokenizer)

# Mask and compile timings over deepseek-llm's vocabulary; a plain program, not a test:
#   build/tests/bench_structured [vocab.gguf] [--docs N]
add_executable(bench_structured bench/bench_structured.cpp)
target_link_libraries(bench_structured PRIVATE pagoda_structured pagoda_tokenizer)
target_include_directories(bench_structured PRIVATE ${CMAKE_SOURCE_DIR})
target_compile_definitions(bench_structured PRIVATE PAGODA_TESTDATA_DIR="${PAGODA_TESTDATA_DIR}")
