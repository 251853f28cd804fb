# usrtrace_trace_functions(<target> [PATCHABLE])
#
# Makes <target>'s functions traceable by usrtrace's function and
# function_graph tracers:
#   default    -finstrument-functions: every function calls usrtrace's
#              hooks; with no tracer running a call costs the two hook calls
#              (one load and one branch each).
#   PATCHABLE  -fpatchable-function-entry=5: five bytes of nops at each
#              entry, patched into a call only while a tracer wants the
#              function; nothing measurable otherwise.
# The target must link usrtrace (or run under `usrtrace record -- COMMAND`,
# which preloads it). Symbols stay in the file (no -s), for the names.
function(usrtrace_trace_functions target)
  cmake_parse_arguments(A "PATCHABLE" "" "" ${ARGN})
  if(A_PATCHABLE)
    target_compile_options(${target} PRIVATE -fpatchable-function-entry=5)
  else()
    target_compile_options(${target} PRIVATE -finstrument-functions)
  endif()
endfunction()
