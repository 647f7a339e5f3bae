# JSON Schema / regex -> GBNF converter (structured output, deliverable 2): unit tests and the
# json-schema-test-suite conformance run through the grammar core's matcher.
pagoda_test(unit/structured/test_json_schema.cpp unit pagoda_structured)
pagoda_test(unit/structured/test_json_schema_errors.cpp unit pagoda_structured)
pagoda_test(unit/structured/test_json_schema_suite.cpp unit pagoda_structured pagoda_tokenizer)
pagoda_test(unit/structured/test_regex.cpp unit pagoda_structured)
pagoda_test(unit/structured/test_json_schema_generated.cpp unit pagoda_structured)
