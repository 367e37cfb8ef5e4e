# `lowbit bench serve`'s load generator against an in-process mock server (127.0.0.1, an ephemeral port).
# The client's sources are compiled in directly rather than through lowbit_serve, so the unit cases need neither
# the engine nor a model.
file(GLOB LOWBIT_bench_client_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/serve/bench_*.cpp)
lowbit_test(test_bench_client SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bench_client.cpp ${LOWBIT_bench_client_SRC}
            LIBS lowbit_core PkgConfig::HTTPLIB Threads::Threads nlohmann_json::nlohmann_json LABELS integration)
# BenchServeCli runs the built `lowbit bench serve` against the mock.
add_dependencies(test_bench_client lowbit)
