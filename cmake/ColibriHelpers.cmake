# colibri_library(NAME SOURCES ... DEPS ...): a static library of project code,
# built with the project's warnings, whose include root is the repository root.
function(colibri_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE colibri_warnings)
endfunction()

# colibri_test(NAME SOURCES ... DEPS ... [LABELS ...]): a GoogleTest binary whose
# cases are discovered when ctest runs (no extra work at build time).
# Tests see COLIBRI_FIXTURES_DIR in their environment.
function(colibri_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock colibri_warnings)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES ENVIRONMENT "COLIBRI_FIXTURES_DIR=${COLIBRI_FIXTURES_DIR};COLIBRI_BINARY_DIR=${PROJECT_BINARY_DIR}"
               LABELS "${ARG_LABELS}"
               TIMEOUT ${ARG_TIMEOUT})
endfunction()
