pagoda_test(e2e/test_bench_faults.cpp e2e httplib::httplib nlohmann_json::nlohmann_json Threads::Threads)
add_dependencies(test_bench_faults pagoda)
pagoda_test(e2e/test_bench_serve.cpp e2e httplib::httplib nlohmann_json::nlohmann_json Threads::Threads)
add_dependencies(test_bench_serve pagoda)
