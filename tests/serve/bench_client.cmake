# `lowbit bench serve`'s load generator: unit cases against an in-process mock server (127.0.0.1, an ephemeral
# port) with known delays, usage and failures; the CLI against the same mock; and one run against a real
# `lowbit serve` child on stories260K (skipped without ../shared). The client's sources are compiled in directly
# rather than through lowbit_serve: the client needs neither the engine nor a model.
file(GLOB LOWBIT_bench_client_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/serve/bench_*.cpp)
lowbit_test(test_bench_client SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bench_client.cpp ${LOWBIT_bench_client_SRC}
            LIBS lowbit_core PkgConfig::HTTPLIB Threads::Threads nlohmann_json::nlohmann_json LABELS integration)
# BenchServeCli and BenchServeReal run the built `lowbit`.
add_dependencies(test_bench_client lowbit)
