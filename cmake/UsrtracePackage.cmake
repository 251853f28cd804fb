# The libraries users link, and how they are installed.
#
#   usrtrace         libusrtrace.so.0 (alias usrtrace::usrtrace)
#   usrtrace_static  libusrtrace.a    (alias usrtrace::usrtrace_static)
#
# Both hold every object of src/ (each usrtrace_cc_library's objects) and
# export only the public API: the sources are compiled with hidden
# visibility, public functions are marked USRTRACE_EXPORT, and the shared
# library's version script (usrtrace.map) keeps std:: template instances
# and the like local.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(_usrtrace_libs GLOBAL PROPERTY USRTRACE_LIBRARIES)
set(_usrtrace_objects "")
foreach(lib IN LISTS _usrtrace_libs)
  list(APPEND _usrtrace_objects $<TARGET_OBJECTS:${lib}_objects>)
endforeach()

set(_usrtrace_includes
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

add_library(usrtrace SHARED ${_usrtrace_objects})
add_library(usrtrace::usrtrace ALIAS usrtrace)
set_target_properties(usrtrace PROPERTIES
  VERSION ${PROJECT_VERSION} SOVERSION 0 LINKER_LANGUAGE CXX
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/usrtrace.map)
target_include_directories(usrtrace PUBLIC ${_usrtrace_includes})
target_link_libraries(usrtrace PUBLIC fmt::fmt PRIVATE Threads::Threads ${CMAKE_DL_LIBS} zstd elf Zydis::Zydis)
target_link_options(usrtrace PRIVATE -Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/usrtrace.map)
if(NOT USRTRACE_SANITIZE)
  # Sanitizer runtimes are linked into executables only, so their symbols
  # are undefined in a sanitized shared library.
  target_link_options(usrtrace PRIVATE -Wl,--no-undefined)
endif()

add_library(usrtrace_static STATIC ${_usrtrace_objects})
add_library(usrtrace::usrtrace_static ALIAS usrtrace_static)
set_target_properties(usrtrace_static PROPERTIES OUTPUT_NAME usrtrace LINKER_LANGUAGE CXX)
target_include_directories(usrtrace_static PUBLIC ${_usrtrace_includes})
target_link_libraries(usrtrace_static PUBLIC fmt::fmt Threads::Threads ${CMAKE_DL_LIBS} zstd elf Zydis)
# A program linked with the archive pulls only the objects it uses; the
# crash dump's object must come along so that USRTRACE_DUMP_ON_CRASH is read
# at start-up (src/crash), and the thread lifecycle events' (the
# pthread_setname_np interposer, and the event write path that registers
# usrtrace:thread_exit with the writer registry: src/write). usrtrace.pc's
# Libs.private says the same.
target_link_options(usrtrace_static INTERFACE "LINKER:-u,usrtrace_dump_on_crash"
  "LINKER:-u,usrtrace_internal_setname")

if(USRTRACE_INSTALL)
  set(_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/usrtrace)
  # Two components, the two Debian packages (cmake/UsrtraceCPack.cmake):
  # Runtime (usrtrace: the command, libusrtrace.so.0, the preloaded runtime,
  # man pages, completion) and Development (libusrtrace-dev: headers, the
  # archive, the .so link, the CMake package, usrtrace.pc).
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/usrtrace
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT Development
          FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
  install(TARGETS usrtrace usrtrace_static EXPORT usrtraceTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Runtime NAMELINK_COMPONENT Development
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development)
  install(EXPORT usrtraceTargets NAMESPACE usrtrace:: DESTINATION ${_cmakedir} COMPONENT Development)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/usrtraceConfig.cmake.in
    ${PROJECT_BINARY_DIR}/usrtraceConfig.cmake INSTALL_DESTINATION ${_cmakedir})
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/usrtraceConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)  # 0.x: a minor version may break the API
  install(FILES ${PROJECT_BINARY_DIR}/usrtraceConfig.cmake
                ${PROJECT_BINARY_DIR}/usrtraceConfigVersion.cmake
                ${PROJECT_SOURCE_DIR}/cmake/usrtraceFunctionTracing.cmake DESTINATION ${_cmakedir}
          COMPONENT Development)

  # usrtrace.pc, relocatable: the prefix is found from the .pc file's own
  # place, so `cmake --install --prefix DIR` works for any DIR.
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(USRTRACE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
    set(USRTRACE_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
    set(USRTRACE_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
  else()
    file(RELATIVE_PATH _up "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
    string(REGEX REPLACE "/$" "" _up "${_up}")
    set(USRTRACE_PC_PREFIX "\${pcfiledir}/${_up}")
    set(USRTRACE_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
    set(USRTRACE_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/usrtrace.pc.in ${PROJECT_BINARY_DIR}/usrtrace.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/usrtrace.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
          COMPONENT Development)

  # The license (MIT, LICENSE at the root), where Debian puts it:
  # share/doc/PACKAGE/copyright (tests/package checks it after apt-get install).
  foreach(_license LICENSE LICENSE.txt LICENSE.md COPYING)
    if(EXISTS ${PROJECT_SOURCE_DIR}/${_license})
      install(FILES ${PROJECT_SOURCE_DIR}/${_license} DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/usrtrace
              RENAME copyright COMPONENT Runtime)
      install(FILES ${PROJECT_SOURCE_DIR}/${_license} DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/libusrtrace-dev
              RENAME copyright COMPONENT Development)
      break()
    endif()
  endforeach()
endif()

# libusrtrace-preload.so: what `usrtrace record -- COMMAND` preloads
# (src/preload/preload.cc): libusrtrace.so, and the hold before main().
add_library(usrtrace_preload SHARED ${PROJECT_SOURCE_DIR}/src/preload/preload.cc)
set_target_properties(usrtrace_preload PROPERTIES OUTPUT_NAME usrtrace-preload
  INSTALL_RPATH "$ORIGIN")
target_compile_options(usrtrace_preload PRIVATE ${USRTRACE_WARNINGS} ${USRTRACE_LIB_FLAGS})
target_link_libraries(usrtrace_preload PRIVATE usrtrace ${CMAKE_DL_LIBS})
if(USRTRACE_FUNCTION_PATCH_IN_LIB)
  target_compile_definitions(usrtrace_preload PRIVATE USRTRACE_PRELOAD_FUNCTION_HOOKS=1)
  # Its _Unwind_* shells must have no landing pads (see src/CMakeLists.txt).
  target_compile_options(usrtrace_preload PRIVATE -fno-exceptions
    $<$<STREQUAL:${USRTRACE_SANITIZE},thread>:-fno-sanitize=thread>)
endif()
if(USRTRACE_INSTALL)
  install(TARGETS usrtrace_preload LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Runtime)
endif()
