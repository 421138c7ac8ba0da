# Installation of locus (included by the top-level CMakeLists.txt):
#   <libdir>/liblocus.so*, <libdir>/liblocus.a, <includedir>/locus.h,
#   <libdir>/cmake/locus/locus-{config,config-version,targets*}.cmake
#     (find_package(locus): targets locus::locus and locus::locus-static),
#   <libdir>/pkgconfig/locus.pc (pkg-config locus; --static adds -pthread).
#   <bindir>/locus (the locus command, tools/locus) and <mandir>/man1/locus.1.
# Every path is relative to the install prefix, so `cmake --install --prefix`
# and DESTDIR work and no file refers to the build or source tree. (With an
# absolute CMAKE_INSTALL_LIBDIR, CMake writes the configure-time prefix into
# locus-targets.cmake: set CMAKE_INSTALL_PREFIX when configuring, not later.)
# See docs/install.md.

include(CMakePackageConfigHelpers)

set(LOCUS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/locus)

# Names seen by consumers: locus::locus (shared), locus::locus-static (static),
# the same names as the aliases inside this tree.
set_target_properties(locus PROPERTIES EXPORT_NAME locus)
set_target_properties(locus_static PROPERTIES EXPORT_NAME locus-static)

install(TARGETS locus locus_static EXPORT locus-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/locus.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# ---- CMake package ------------------------------------------------------------
install(EXPORT locus-targets NAMESPACE locus:: FILE locus-targets.cmake
        DESTINATION ${LOCUS_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/locus-config.cmake.in
  ${PROJECT_BINARY_DIR}/locus-config.cmake
  INSTALL_DESTINATION ${LOCUS_INSTALL_CMAKEDIR})

# Which requested versions the installed one satisfies. The SOVERSION is
# MAJOR.MINOR: while the major version is 0, every minor release may change the
# API and ABI (semantic versioning gives 0.y.z no stability promise), so
# find_package(locus 0.1) must accept 0.1.z only, never 0.2: SameMinorVersion.
# From 1.0 on, minor releases are meant to be compatible: SameMajorVersion.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_locus_compat SameMinorVersion)
else()
  set(_locus_compat SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/locus-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${_locus_compat})
unset(_locus_compat)

install(FILES ${PROJECT_BINARY_DIR}/locus-config.cmake ${PROJECT_BINARY_DIR}/locus-config-version.cmake
        DESTINATION ${LOCUS_INSTALL_CMAKEDIR})

# ---- pkg-config ---------------------------------------------------------------
# libdir and includedir are written as ${prefix}/<dir>, or as given when
# CMAKE_INSTALL_LIBDIR/INCLUDEDIR is absolute. The prefix is the one of the
# install itself (`cmake --install build --prefix P` writes prefix=P; with
# DESTDIR, the prefix without DESTDIR), so the file is written when installing,
# straight into place: no file of the build tree is written at install time.
foreach(_d LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_d}}")
    set(LOCUS_PC_${_d} "${CMAKE_INSTALL_${_d}}")
  else()
    set(LOCUS_PC_${_d} "\${prefix}/${CMAKE_INSTALL_${_d}}")
  endif()
endforeach()
unset(_d)
# First pass now (everything but the prefix), second pass at install time.
set(LOCUS_PC_PREFIX "@LOCUS_PC_PREFIX@")
configure_file(${CMAKE_CURRENT_LIST_DIR}/locus.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/locus.pc.in @ONLY)
install(CODE "
  set(LOCUS_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(_locus_pc_dir \"${CMAKE_INSTALL_LIBDIR}/pkgconfig\")
  if(NOT IS_ABSOLUTE \"\${_locus_pc_dir}\")
    set(_locus_pc_dir \"\${CMAKE_INSTALL_PREFIX}/\${_locus_pc_dir}\")
  endif()
  set(_locus_pc \"\$ENV{DESTDIR}\${_locus_pc_dir}/locus.pc\")
  message(STATUS \"Installing: \${_locus_pc}\")
  configure_file(\"${PROJECT_BINARY_DIR}/pkgconfig/locus.pc.in\" \"\${_locus_pc}\" @ONLY)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${_locus_pc}\")
")

# ---- the locus command (tools/locus, docs/locus.1; see docs/tools.md) ----------
# tools/locus is a Python script whose "@LOCUS_CLI_...@" values are filled in
# twice: <build>/tools/locus points at the build tree's library and the source
# tree (for `locus bench`); <build>/tools/install/locus, the one installed in
# <bindir>, names the library relative to its own directory (<bindir> ->
# <libdir>/liblocus.so.X.Y) and no source tree, so that, like every installed
# file, it does not name the build or source tree and survives a relocated or
# DESTDIR install. LOCUS_LIB or --lib override both.
set(_locus_cli_soname liblocus.so.${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
get_target_property(_locus_cli_dir locus LIBRARY_OUTPUT_DIRECTORY)
if(NOT _locus_cli_dir)
  set(_locus_cli_dir ${PROJECT_BINARY_DIR})
endif()
set(LOCUS_CLI_LIB ${_locus_cli_dir}/${_locus_cli_soname})
set(LOCUS_CLI_SOURCE_DIR ${PROJECT_SOURCE_DIR})
set(LOCUS_CLI_ANALYSIS_DIR ${PROJECT_SOURCE_DIR}/tools/analysis)
configure_file(${PROJECT_SOURCE_DIR}/tools/locus ${PROJECT_BINARY_DIR}/tools/locus @ONLY)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(LOCUS_CLI_LIB ${CMAKE_INSTALL_LIBDIR}/${_locus_cli_soname})
elseif(IS_ABSOLUTE "${CMAKE_INSTALL_BINDIR}")
  # absolute bindir, relative libdir: the configure-time prefix is the only one known
  set(LOCUS_CLI_LIB ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/${_locus_cli_soname})
else()
  file(RELATIVE_PATH LOCUS_CLI_LIB /p/${CMAKE_INSTALL_BINDIR} /p/${CMAKE_INSTALL_LIBDIR}/${_locus_cli_soname})
endif()
set(LOCUS_CLI_SOURCE_DIR "")
# the analysers' Python modules (locus align, locus pages, locus dedup): <datadir>/locus/analysis
if(IS_ABSOLUTE "${CMAKE_INSTALL_DATADIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_BINDIR}")
  set(LOCUS_CLI_ANALYSIS_DIR ${CMAKE_INSTALL_FULL_DATADIR}/locus/analysis)
else()
  file(RELATIVE_PATH LOCUS_CLI_ANALYSIS_DIR /p/${CMAKE_INSTALL_BINDIR} /p/${CMAKE_INSTALL_DATADIR}/locus/analysis)
endif()
file(GLOB _locus_analysis_py ${PROJECT_SOURCE_DIR}/tools/analysis/*.py)
install(FILES ${_locus_analysis_py} DESTINATION ${CMAKE_INSTALL_DATADIR}/locus/analysis)
unset(_locus_analysis_py)
configure_file(${PROJECT_SOURCE_DIR}/tools/locus ${PROJECT_BINARY_DIR}/tools/install/locus @ONLY)
install(PROGRAMS ${PROJECT_BINARY_DIR}/tools/install/locus DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/docs/locus.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
# The sampling library of `locus align` (tools/analysis/sample.c): preloaded beside
# liblocus.so, found by the command next to it (same directory). Not part of
# the allocator: it uses libc freely and is never linked into programs.
add_library(locus_sample SHARED ${PROJECT_SOURCE_DIR}/tools/analysis/sample.c)
target_compile_options(locus_sample PRIVATE -Wall -Wextra -fvisibility=hidden)
target_link_libraries(locus_sample PRIVATE Threads::Threads)
set_target_properties(locus_sample PROPERTIES OUTPUT_NAME locus_sample
                      LIBRARY_OUTPUT_DIRECTORY ${_locus_cli_dir})
install(TARGETS locus_sample LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
unset(_locus_cli_soname)
unset(_locus_cli_dir)
