# Debian packages, by `cpack -G DEB` in a build configured with
# -DCMAKE_INSTALL_PREFIX=/usr (tests/package/package_test.sh does it all):
#
#   usrtrace_VERSION_amd64.deb         the Runtime component: bin/usrtrace,
#                                      libusrtrace.so.0, libusrtrace-preload.so,
#                                      man pages, bash completion
#   libusrtrace-dev_VERSION_amd64.deb  the Development component: headers,
#                                      libusrtrace.a and .so, CMake package,
#                                      usrtrace.pc
#
# Their library dependencies come from dpkg-shlibdeps (dpkg-dev); the -dev
# package names the -dev packages its headers and archive need.
set(CPACK_PACKAGE_NAME usrtrace)
set(CPACK_PACKAGE_VENDOR "usrtrace")
set(CPACK_PACKAGE_CONTACT "usrtrace developers <usrtrace@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "ftrace for user space: tracing for C++ programs")
set(CPACK_PACKAGE_DESCRIPTION
  "Per-CPU lock-free ring buffers, instances, snapshots, typed trace events with filters\n\
and triggers, function and function_graph tracers, latency tracers and trace_marker for\n\
user-space programs, driven through ftrace's control files; records trace-cmd's trace.dat.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
# Stripped, as Debian ships binaries (a RelWithDebInfo build has 50 MB of
# debug info in the command alone).
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL Runtime Development)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME usrtrace)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "bash-completion, trace-cmd")
# A shlibs file for libusrtrace.so.0, and the ldconfig trigger with it.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libusrtrace-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS
  "usrtrace (= ${PROJECT_VERSION}), libfmt-dev, libzstd-dev, libelf-dev, libzydis-dev")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "the usrtrace command and runtime")
set(CPACK_COMPONENT_DEVELOPMENT_DESCRIPTION "headers and libraries to build programs with usrtrace")
include(CPack)
