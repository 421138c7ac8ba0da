# Cross-compiling locus for aarch64 Linux with Debian's cross toolchain
# (packages gcc-aarch64-linux-gnu g++-aarch64-linux-gnu; qemu-user to run the
# tests). Usage:
#   cmake -S . -B build-aarch64 -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake
#   ninja -C build-aarch64 && ctest --test-dir build-aarch64
# ctest then runs every test executable under qemu-aarch64 (see
# CMAKE_CROSSCOMPILING_EMULATOR below). LOCUS_CROSS_TRIPLE, LOCUS_CROSS_SYSROOT
# and LOCUS_CROSS_QEMU override the defaults (e.g. another toolchain prefix).

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

if(NOT DEFINED LOCUS_CROSS_TRIPLE)
  set(LOCUS_CROSS_TRIPLE aarch64-linux-gnu)
endif()
# Debian's cross libc, headers and libstdc++ live there (libc6-dev-arm64-cross).
if(NOT DEFINED LOCUS_CROSS_SYSROOT)
  set(LOCUS_CROSS_SYSROOT /usr/${LOCUS_CROSS_TRIPLE})
endif()

set(CMAKE_C_COMPILER   ${LOCUS_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${LOCUS_CROSS_TRIPLE}-g++)
# The top-level CMakeLists links liblocus.a's objects with `${CMAKE_C_COMPILER} -r`
# (the cross gcc drives the cross ld) and localises the hidden symbols with
# `${CMAKE_OBJCOPY} --localize-hidden`: it must be the cross objcopy, the
# host's would not know the aarch64 relocations. The same for ar and friends.
find_program(CMAKE_OBJCOPY NAMES ${LOCUS_CROSS_TRIPLE}-objcopy REQUIRED)
find_program(CMAKE_AR      NAMES ${LOCUS_CROSS_TRIPLE}-ar      REQUIRED)
find_program(CMAKE_RANLIB  NAMES ${LOCUS_CROSS_TRIPLE}-ranlib  REQUIRED)
find_program(CMAKE_NM      NAMES ${LOCUS_CROSS_TRIPLE}-nm)
find_program(CMAKE_STRIP   NAMES ${LOCUS_CROSS_TRIPLE}-strip)
find_program(CMAKE_OBJDUMP NAMES ${LOCUS_CROSS_TRIPLE}-objdump)
find_program(CMAKE_READELF NAMES ${LOCUS_CROSS_TRIPLE}-readelf)

# Libraries, headers and packages only from the target's root; programs
# (bash, python3, the emulator) from the host.
set(CMAKE_FIND_ROOT_PATH ${LOCUS_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest (and try_run) run target executables through this: qemu-user with the
# cross libc's root as the prefix for the dynamic loader and the libraries.
# qemu-user passes its environment on to the program; -E adds one variable
# for it: LOCUS_TEST_EMULATOR, the same command again, which the tests that
# run themselves again (misuse, test_source) put in front of their own path:
# without binfmt_misc an aarch64 program under qemu cannot exec an aarch64
# program, but it can exec the (x86-64) emulator.
if(NOT DEFINED LOCUS_CROSS_QEMU)
  find_program(LOCUS_CROSS_QEMU NAMES qemu-aarch64 qemu-aarch64-static)
endif()
if(LOCUS_CROSS_QEMU)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${LOCUS_CROSS_QEMU} -L ${LOCUS_CROSS_SYSROOT}
      -E "LOCUS_TEST_EMULATOR=${LOCUS_CROSS_QEMU} -L ${LOCUS_CROSS_SYSROOT}")
endif()
