# Man pages: docs/cli/usrtrace*.md (written in the man layout: NAME,
# SYNOPSIS, DESCRIPTION, ...) turned into section 1 pages by go-md2man
# (Debian's go-md2man) at build time, and installed with the command.
# Without go-md2man the build says so and installs none.
find_program(USRTRACE_GO_MD2MAN go-md2man)
if(NOT USRTRACE_GO_MD2MAN)
  message(WARNING "go-md2man not found: no man pages (apt-get install go-md2man)")
  return()
endif()
file(GLOB _usrtrace_man_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/cli/usrtrace*.md)
set(_usrtrace_man_pages "")
foreach(md IN LISTS _usrtrace_man_sources)
  get_filename_component(_name ${md} NAME_WE)
  set(_page ${PROJECT_BINARY_DIR}/man/man1/${_name}.1)
  add_custom_command(OUTPUT ${_page}
    COMMAND ${CMAKE_COMMAND} -DMD2MAN=${USRTRACE_GO_MD2MAN} -DIN=${md} -DOUT=${_page}
            -DVERSION=${PROJECT_VERSION} -P ${PROJECT_SOURCE_DIR}/cmake/md2man.cmake
    DEPENDS ${md} ${PROJECT_SOURCE_DIR}/cmake/md2man.cmake
    COMMENT "Man page ${_name}(1)" VERBATIM)
  list(APPEND _usrtrace_man_pages ${_page})
endforeach()
add_custom_target(usrtrace_man ALL DEPENDS ${_usrtrace_man_pages})
install(FILES ${_usrtrace_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT Runtime)
