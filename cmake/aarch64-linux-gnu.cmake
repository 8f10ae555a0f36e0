# Cross build for 64-bit ARM Linux (scripts/test-arm64.sh): Debian's
# aarch64-linux-gnu compilers, the target's libraries (abseil, GoogleTest)
# unpacked from Debian's arm64 packages into COLIBRI_ARM64_SYSROOT, and the
# test binaries run under qemu-user. QEMU_CPU in the environment picks the
# emulated CPU (e.g. "max" with the dot-product instructions, "cortex-a53"
# without them).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

if(NOT COLIBRI_ARM64_SYSROOT)
  set(COLIBRI_ARM64_SYSROOT "$ENV{COLIBRI_ARM64_SYSROOT}")
endif()
if(NOT COLIBRI_ARM64_SYSROOT)
  message(FATAL_ERROR "set COLIBRI_ARM64_SYSROOT to the unpacked arm64 packages (scripts/test-arm64.sh)")
endif()
# try_compile projects see the toolchain file again; pass the setting on.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES COLIBRI_ARM64_SYSROOT)

set(CMAKE_FIND_ROOT_PATH "${COLIBRI_ARM64_SYSROOT}" /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# The unpacked packages keep Debian's multiarch layout (OpenSSL's
# configuration header, for one, is in include/aarch64-linux-gnu).
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_C_FLAGS_INIT "-isystem ${COLIBRI_ARM64_SYSROOT}/usr/include/aarch64-linux-gnu")
set(CMAKE_CXX_FLAGS_INIT "-isystem ${COLIBRI_ARM64_SYSROOT}/usr/include/aarch64-linux-gnu")
# Some packages (libbz2, which RocksDB needs) still install into /lib.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${COLIBRI_ARM64_SYSROOT}/lib/aarch64-linux-gnu")
# pkg-config (cpp-httplib, gRPC's re2, ...) reads the target's .pc files.
set(ENV{PKG_CONFIG_LIBDIR}
    "${COLIBRI_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${COLIBRI_ARM64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${COLIBRI_ARM64_SYSROOT}")

# The C library from the cross compiler's tree; abseil's shared libraries
# (and the ones they load in turn) from the unpacked packages.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu
    -E LD_LIBRARY_PATH=${COLIBRI_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu:${COLIBRI_ARM64_SYSROOT}/lib/aarch64-linux-gnu)
