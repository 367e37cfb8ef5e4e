# `lowbit serve` end to end: the tests run the lowbit binary as a child process (build it first) and talk HTTP.
set(LOWBIT_SERVER_TEST_LIBS lowbit_core PkgConfig::HTTPLIB nlohmann_json::nlohmann_json Threads::Threads)
lowbit_test(test_server SOURCES test_server.cpp LIBS ${LOWBIT_SERVER_TEST_LIBS} LABELS integration)
add_dependencies(test_server lowbit)
lowbit_test(test_server_lifecycle SOURCES test_server_lifecycle.cpp LIBS ${LOWBIT_SERVER_TEST_LIBS} LABELS integration)
add_dependencies(test_server_lifecycle lowbit)
# The official openai npm client (scripts/setup.sh: npm ci --prefix tests/serve); skipped without node.
lowbit_test(test_server_openai SOURCES test_server_openai.cpp LIBS ${LOWBIT_SERVER_TEST_LIBS} LABELS integration)
add_dependencies(test_server_openai lowbit)
# The server's pieces without HTTP: chat templates, request parsing, UTF-8 and stop-string text assembly.
lowbit_test(test_server_units SOURCES test_server_units.cpp LIBS lowbit_serve LABELS integration)
# The Jinja chat-template interpreter against Python's jinja2 (tests/reference/render_jinja.py, Debian's
# python3-jinja2), its bounds, and lowbit serve rendering a model's own template.
lowbit_test(test_jinja SOURCES test_jinja.cpp LIBS lowbit_serve LABELS integration)
add_dependencies(test_jinja lowbit)
