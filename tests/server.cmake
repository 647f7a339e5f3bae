# HTTP server (engineer "server"): protocol and config unit tests, in-process HTTP tests against
# a test double of the engine, and end-to-end tests of the real `pagoda serve` binary.

# The HTTP layer alone (no engine, no model): lets the in-process tests build and run without
# the engine libraries.
add_library(pagoda_server_http STATIC
  ${CMAKE_SOURCE_DIR}/server/openai_protocol.cpp
  ${CMAKE_SOURCE_DIR}/server/handlers.cpp
  ${CMAKE_SOURCE_DIR}/server/http_server.cpp
  ${CMAKE_SOURCE_DIR}/server/metrics.cpp
  ${CMAKE_SOURCE_DIR}/server/access_log.cpp
  ${CMAKE_SOURCE_DIR}/server/server_config.cpp)
target_include_directories(pagoda_server_http PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(pagoda_server_http PUBLIC httplib::httplib nlohmann_json::nlohmann_json
  spdlog::spdlog Threads::Threads)

pagoda_test(unit/test_openai_protocol.cpp unit pagoda_server_http)
pagoda_test(unit/test_server_config.cpp unit pagoda_server_http)
pagoda_test(unit/test_server_http.cpp unit pagoda_server_http)
