# The version the binaries print for --version: `git describe --always --dirty`
# of the source tree, taken when CMake configures (so it changes on the next
# configure, not on every commit), or the project's version where there is no
# git repository (a source tarball) or git fails. Written to
# ${PROJECT_BINARY_DIR}/generated/colibri_version.h, never into the source
# tree; targets get it by linking colibri_version.
set(COLIBRI_VERSION_STRING "${PROJECT_VERSION}")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(
    COMMAND "${GIT_EXECUTABLE}" describe --always --dirty
    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
    OUTPUT_VARIABLE colibri_git_describe
    RESULT_VARIABLE colibri_git_result
    OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_QUIET)
  if(colibri_git_result EQUAL 0 AND NOT colibri_git_describe STREQUAL "")
    # No tag yet: describe gives only the hash; keep the project version in front.
    if(colibri_git_describe MATCHES "^[0-9a-f]+(-dirty)?$")
      set(COLIBRI_VERSION_STRING "${PROJECT_VERSION}-g${colibri_git_describe}")
    else()
      set(COLIBRI_VERSION_STRING "${colibri_git_describe}")
    endif()
  endif()
endif()
message(STATUS "colibri version: ${COLIBRI_VERSION_STRING}")

configure_file("${CMAKE_CURRENT_LIST_DIR}/colibri_version.h.in"
               "${PROJECT_BINARY_DIR}/generated/colibri_version.h" @ONLY)
add_library(colibri_version INTERFACE)
target_include_directories(colibri_version INTERFACE "${PROJECT_BINARY_DIR}/generated")
