# Chat templates (engineer E): language unit tests and the testdata conformance run.
pagoda_test(unit/test_chat_template.cpp unit pagoda_chat_template)
pagoda_test(unit/test_chat_template_data.cpp unit pagoda_chat_template Threads::Threads)
pagoda_test(unit/test_chat_template_hostile.cpp unit pagoda_chat_template)
pagoda_test(unit/test_chat_template_cli.cpp e2e pagoda_chat_template pagoda_gguf)
add_dependencies(test_chat_template_cli pagoda)
