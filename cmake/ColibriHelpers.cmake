# colibri_library(NAME SOURCES ... DEPS ...): a static library of project code,
# built with the project's warnings, whose include root is the repository root.
function(colibri_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE colibri_warnings)
endfunction()

# colibri_test(NAME SOURCES ... DEPS ... [LABELS ...]): a GoogleTest binary whose
# cases are discovered when ctest runs (no extra work at build time), named
# "NAME.Suite.Case" so that `ctest -R NAME` selects one binary's tests.
# Tests get the fixtures and build folders as the compile definitions
# COLIBRI_TEST_FIXTURES_DIR and COLIBRI_TEST_BINARY_DIR; the environment
# variables COLIBRI_FIXTURES_DIR and COLIBRI_BINARY_DIR override them at run time
# (tests/support/paths.h). (Not through ctest's ENVIRONMENT property:
# gtest_discover_tests splits a list-valued property at its semicolons.) Tests labelled
# "sanitize" also run in the ASan+UBSan pass of scripts/test.sh (parsers and
# kernels: the code that meets hostile input); colibri_sanitize_tests builds them.
# Their main is tests/support/test_main.cc: GoogleTest's, after it applies the
# environment's process knobs as programs' mains do (COLIBRI_CPU).
function(colibri_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;PREFIX" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT TARGET colibri_test_main)
    colibri_library(colibri_test_main
      SOURCES ${PROJECT_SOURCE_DIR}/tests/support/test_main.cc
      DEPS colibri_common GTest::gtest)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} colibri_test_main GTest::gtest GTest::gmock colibri_warnings)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if("sanitize" IN_LIST ARG_LABELS)
    add_dependencies(colibri_sanitize_tests ${name})
  endif()
  target_compile_definitions(${name} PRIVATE
    COLIBRI_TEST_FIXTURES_DIR="${COLIBRI_FIXTURES_DIR}"
    COLIBRI_TEST_BINARY_DIR="${PROJECT_BINARY_DIR}")
  # A test's own sources at -O1 in optimized builds (it comes after the
  # configuration's -O3 or -O2 and wins): GoogleTest's macros make large
  # functions that -O3 spends a third of the compile time on, and the code
  # under test is in the libraries, still built at -O3. (Floating point is
  # the same at every level: no contraction, no fast-math.)
  target_compile_options(${name} PRIVATE $<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-O1>)
  set(props TIMEOUT ${ARG_TIMEOUT})
  if(ARG_LABELS)
    list(APPEND props LABELS "${ARG_LABELS}")
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST TEST_PREFIX "${name}." PROPERTIES ${props})
endfunction()
