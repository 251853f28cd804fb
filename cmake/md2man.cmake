# cmake -DMD2MAN=go-md2man -DIN=docs/cli/usrtrace-record.md -DOUT=usrtrace-record.1
#       -DVERSION=0.1.0 -P md2man.cmake
# One docs/cli page to a man page. The markdown's "# usrtrace-record" heading
# becomes the title line (.TH USRTRACE-RECORD 1 ...), and its NAME line
# "usrtrace record - ..." reads "usrtrace-record - ...", the name man -k and
# whatis look up.
file(READ ${IN} text)
get_filename_component(name ${IN} NAME_WE)
string(TOUPPER ${name} title)
string(REGEX REPLACE "^# [^\n]*\n" "" text "${text}")
# The doc test's hidden setup lines (tests/docs/doc_test.py) are not for readers.
string(REGEX REPLACE "<!-- doc-test:[^\n]*-->\n" "" text "${text}")
string(REPLACE "-" " " spaced ${name})
string(REPLACE "## NAME\n${spaced} -" "## NAME\n${name} -" text "${text}")
get_filename_component(dir ${OUT} DIRECTORY)
file(MAKE_DIRECTORY ${dir})
file(WRITE ${OUT}.md "% ${title} 1 \"\" \"usrtrace ${VERSION}\" \"usrtrace manual\"\n\n${text}")
execute_process(COMMAND ${MD2MAN} -in ${OUT}.md -out ${OUT} RESULT_VARIABLE rc)
file(REMOVE ${OUT}.md)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "go-md2man failed on ${IN}: ${rc}")
endif()
