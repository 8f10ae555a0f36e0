// The demo model committed in the source tree (scripts/demo-model). Header-only: a
// test using it gets COLIBRI_SOURCE_DIR="${PROJECT_SOURCE_DIR}" from its CMake
// target (target_compile_definitions); without it the path is relative to the
// working directory.
#ifndef COLIBRI_TESTS_SUPPORT_DEMO_MODEL_H_
#define COLIBRI_TESTS_SUPPORT_DEMO_MODEL_H_

#ifndef COLIBRI_SOURCE_DIR
#define COLIBRI_SOURCE_DIR "."
#endif

namespace colibri::testing {

inline constexpr char kDemoModel[] =
    COLIBRI_SOURCE_DIR "/scripts/demo-model/colibri-demo-kjv-q8_0.gguf";

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_DEMO_MODEL_H_
