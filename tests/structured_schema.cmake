# JSON Schema / regex -> GBNF converter (structured output, deliverable 2) and its tests.
# Until engine/structured/CMakeLists.txt (pagoda_structured) exists in this branch, the
# converter builds as its own library here.
if(NOT TARGET pagoda_structured)
  add_library(pagoda_structured_schema STATIC
    ${CMAKE_SOURCE_DIR}/engine/structured/json_schema.cpp
    ${CMAKE_SOURCE_DIR}/engine/structured/json_schema_objects.cpp
    ${CMAKE_SOURCE_DIR}/engine/structured/json_schema_scalars.cpp
    ${CMAKE_SOURCE_DIR}/engine/structured/regex.cpp
    ${CMAKE_SOURCE_DIR}/engine/structured/regex_gbnf.cpp)
  target_include_directories(pagoda_structured_schema PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(pagoda_structured_schema PUBLIC nlohmann_json::nlohmann_json)
  set(PAGODA_SCHEMA_LIB pagoda_structured_schema)
else()
  set(PAGODA_SCHEMA_LIB pagoda_structured)
endif()
pagoda_test(unit/structured/test_json_schema.cpp unit ${PAGODA_SCHEMA_LIB})
pagoda_test(unit/structured/test_regex.cpp unit ${PAGODA_SCHEMA_LIB})
