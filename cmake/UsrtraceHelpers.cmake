# Helpers shared by every directory (Abseil's absl_cc_library habit).

set(USRTRACE_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wcast-align -Wunused -Woverloaded-virtual -Wconversion -Wsign-conversion
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND USRTRACE_WARNINGS -Wthread-safety)
endif()
if(USRTRACE_WERROR)
  list(APPEND USRTRACE_WARNINGS -Werror)
endif()

set(USRTRACE_SANITIZER_FLAGS "")
if(USRTRACE_SANITIZE STREQUAL "address")
  set(USRTRACE_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
elseif(USRTRACE_SANITIZE STREQUAL "thread")
  set(USRTRACE_SANITIZER_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT USRTRACE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "USRTRACE_SANITIZE must be '', 'address' or 'thread'")
endif()
if(USRTRACE_SANITIZER_FLAGS)
  add_compile_options(${USRTRACE_SANITIZER_FLAGS})
  add_link_options(${USRTRACE_SANITIZER_FLAGS})
endif()

# The tracer never traces itself: library code is never instrumented.
# (-fpatchable-function-entry=0: no patchable entries even when a build
# passes the flag to everything; the patcher must never patch itself.)
set(USRTRACE_LIB_FLAGS $<$<CXX_COMPILER_ID:GNU>:-fno-instrument-functions> -fpatchable-function-entry=0
    -fvisibility=hidden -fvisibility-inlines-hidden)

# usrtrace_cc_library(name SRCS ... [DEPS ...] [PUBLIC_DEPS ...])
# A static library for the tests and tools, built from an object library
# (name_objects) whose objects also go into libusrtrace.so and libusrtrace.a
# (cmake/UsrtracePackage.cmake), so every source is compiled once.
function(usrtrace_cc_library name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(${name}_objects OBJECT ${A_SRCS})
  add_library(${name} STATIC $<TARGET_OBJECTS:${name}_objects>)
  foreach(t ${name}_objects ${name})
    target_include_directories(${t} PUBLIC
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>)
    target_link_libraries(${t} PRIVATE ${A_DEPS} PUBLIC ${A_PUBLIC_DEPS})
  endforeach()
  target_compile_options(${name}_objects PRIVATE ${USRTRACE_WARNINGS} ${USRTRACE_LIB_FLAGS})
  set_target_properties(${name}_objects PROPERTIES POSITION_INDEPENDENT_CODE ON)
  set_target_properties(${name} PROPERTIES LINKER_LANGUAGE CXX)
  set_property(GLOBAL APPEND PROPERTY USRTRACE_LIBRARIES ${name})
endfunction()

# usrtrace_cc_test(name SRCS ... DEPS ... [LABELS ...])
function(usrtrace_cc_test name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${A_SRCS})
  target_compile_options(${name} PRIVATE ${USRTRACE_WARNINGS})
  # A test's own sources at -O1 in the optimized builds: GoogleTest's macros
  # make them the slowest files to compile (-O2 took a third longer), and CI
  # compiles them twice (gcc, TSan) on 2 cores. The library under test keeps
  # its -O2. Not the function tracers' fixtures (function/): their call
  # counts depend on what the compiler inlines. And -g1 in every build:
  # line tables and function names are what a failure's backtrace and the
  # sanitizers' reports use; the full -g made them a third slower again.
  foreach(src ${A_SRCS})
    if(NOT src MATCHES "^function/" AND NOT src MATCHES "^/")
      set_property(SOURCE ${src} APPEND PROPERTY COMPILE_OPTIONS "$<$<CONFIG:RelWithDebInfo,Release>:-O1>" -g1)
    endif()
  endforeach()
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main Threads::Threads)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${A_LABELS}")
endfunction()

# usrtrace_trace_functions(): also for the project's own examples and tests.
include(${CMAKE_CURRENT_LIST_DIR}/usrtraceFunctionTracing.cmake)
