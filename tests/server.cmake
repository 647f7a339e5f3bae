# HTTP server (engineer "server"): protocol and config unit tests, in-process HTTP tests against
# a test double of the engine, and end-to-end tests of the real `pagoda serve` binary.

# The HTTP layer alone (no engine, no model): lets the in-process tests build and run without
# the engine libraries.
add_library(pagoda_server_http STATIC
  ${CMAKE_SOURCE_DIR}/server/openai_protocol.cpp
  ${CMAKE_SOURCE_DIR}/server/handlers.cpp
  ${CMAKE_SOURCE_DIR}/server/generation.cpp
  ${CMAKE_SOURCE_DIR}/server/echo_logprobs.cpp
  ${CMAKE_SOURCE_DIR}/server/http_server.cpp
  ${CMAKE_SOURCE_DIR}/server/metrics.cpp
  ${CMAKE_SOURCE_DIR}/server/access_log.cpp
  ${CMAKE_SOURCE_DIR}/server/server_config.cpp
  ${CMAKE_SOURCE_DIR}/server/tool_calls.cpp)
target_include_directories(pagoda_server_http PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(pagoda_server_http PUBLIC httplib::httplib nlohmann_json::nlohmann_json
  spdlog::spdlog Threads::Threads)

pagoda_test(unit/test_openai_protocol.cpp unit pagoda_server_http)
pagoda_test(unit/test_server_config.cpp unit pagoda_server_http)
pagoda_test(unit/test_server_http.cpp unit pagoda_server_http)
# Function calling (engineer "toolcalls"): the output parser, and tools over HTTP.
pagoda_test(unit/test_tool_calls.cpp unit pagoda_server_http)
pagoda_test(unit/test_tool_calls_http.cpp unit pagoda_server_http pagoda_chat_template)

# End-to-end: the real binary on loopback ports (they start `pagoda serve` themselves).
pagoda_test(e2e/test_serve_e2e.cpp e2e httplib::httplib nlohmann_json::nlohmann_json Threads::Threads)
pagoda_test(e2e/test_serve_fuzz.cpp e2e httplib::httplib nlohmann_json::nlohmann_json Threads::Threads)
add_dependencies(test_serve_e2e pagoda)
add_dependencies(test_serve_fuzz pagoda)
# Prompt logprobs (echo + logprobs, max_tokens 0): validation and JSON, then over HTTP (engineer "promptlp").
pagoda_test(unit/test_echo_logprobs.cpp unit pagoda_server_http)
pagoda_test(e2e/test_serve_echo_logprobs.cpp e2e httplib::httplib nlohmann_json::nlohmann_json Threads::Threads)
add_dependencies(test_serve_echo_logprobs pagoda)
# g++ 12.2 at -O3 miscompiles start_server() in this file through IPA-SRA (valgrind: its argument
# vector is destroyed twice; clean at -O2, with ASan, or without IPA-SRA).
set_source_files_properties(e2e/test_serve_echo_logprobs.cpp PROPERTIES COMPILE_OPTIONS -fno-ipa-sra)

# The official OpenAI Node SDK (scripts/test.sh runs `npm ci` in tests/e2e/node first); skipped
# (exit 77) when node or the installed SDK is missing.
find_program(PAGODA_NODE node)
if(PAGODA_NODE)
  add_test(NAME e2e_node_openai
    COMMAND sh -c "test -d node_modules/openai || { echo 'openai SDK not installed: run npm ci in tests/e2e/node'; exit 77; }; exec \"${PAGODA_NODE}\" --test openai.test.mjs"
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests/e2e/node)
  set_tests_properties(e2e_node_openai PROPERTIES LABELS e2e TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "PAGODA_BINARY=$<TARGET_FILE:pagoda>;PAGODA_TESTDATA_DIR=${PAGODA_TESTDATA_DIR}")
endif()

# Function calling through the official Node SDK, against pagoda's HTTP layer over a fake engine
# whose output the requests script (a random-weight model cannot be made to call tools).
add_executable(fake_tool_server e2e/fake_tool_server.cpp)
target_link_libraries(fake_tool_server PRIVATE pagoda_server_http)
target_include_directories(fake_tool_server PRIVATE ${CMAKE_SOURCE_DIR})
if(PAGODA_NODE)
  add_test(NAME e2e_node_openai_tools
    COMMAND sh -c "test -d node_modules/openai || { echo 'openai SDK not installed: run npm ci in tests/e2e/node'; exit 77; }; exec \"${PAGODA_NODE}\" --test tools.test.mjs"
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests/e2e/node)
  set_tests_properties(e2e_node_openai_tools PROPERTIES LABELS e2e TIMEOUT 120 SKIP_RETURN_CODE 77
    ENVIRONMENT "PAGODA_FAKE_TOOL_SERVER=$<TARGET_FILE:fake_tool_server>")
endif()
