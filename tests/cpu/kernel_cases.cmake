# Test-only: the CPU kernel cases of tests/cpu/kernel_cases.h (the registry, the case builder and
# runner), shared by the kernel tests and bench/. Included by tests/CMakeLists.txt, and by
# bench/CMakeLists.txt when the tests are not configured. Its headers (tests/cpu/) and the
# layer-free test support it uses (tests/support/guarded_bytes.h) are on its users' include path.
add_library(bitsplit_kernel_cases STATIC EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/kernel_cases.cpp
            ${CMAKE_CURRENT_LIST_DIR}/kernel_case_weights.cpp)
target_include_directories(bitsplit_kernel_cases PUBLIC ${CMAKE_CURRENT_LIST_DIR} ${CMAKE_CURRENT_LIST_DIR}/../support)
target_link_libraries(bitsplit_kernel_cases PUBLIC bitsplit_cpu PRIVATE bitsplit_warnings)
