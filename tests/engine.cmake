# Engine tests (engineer F). The bookkeeping parts (block pool, KV cache manager, scheduler,
# sampler) have no model dependency; they are compiled into a small library of their own so
# their tests build and run without the model and tokenizer libraries.
add_library(pagoda_engine_core STATIC
  ${CMAKE_SOURCE_DIR}/engine/block_pool.cpp
  ${CMAKE_SOURCE_DIR}/engine/kv_cache_manager.cpp
  ${CMAKE_SOURCE_DIR}/engine/scheduler.cpp
  ${CMAKE_SOURCE_DIR}/engine/sampling.cpp
  ${CMAKE_SOURCE_DIR}/engine/request_stream.cpp)
target_include_directories(pagoda_engine_core PUBLIC ${CMAKE_SOURCE_DIR})

foreach(t test_block_pool test_kv_cache_manager test_scheduler test_sampling test_request_stream
          test_scheduler_prompt_logprobs)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}.cpp)
    pagoda_test(unit/${t}.cpp unit pagoda_engine_core)
  endif()
endforeach()

# The engine end to end on a tiny model (needs the model, CPU backend and model writer).
foreach(t test_engine test_engine_shift test_engine_device_sampling test_engine_prompt_logprobs)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}.cpp)
    pagoda_test(unit/${t}.cpp unit pagoda_engine)
  endif()
endforeach()
