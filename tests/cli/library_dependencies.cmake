# libkiln.so, with everything it loads (ldd), holds none of the packages of
# serving, distributed training or the studio: no libpq, SQLite, OpenSSL or
# Gloo. Run with -DLIBRARY=<path of libkiln.so>.
execute_process(COMMAND ldd ${LIBRARY} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd ${LIBRARY} failed (${rc}): ${err}")
endif()
if(NOT out MATCHES "libdnnl")
  message(FATAL_ERROR "ldd ${LIBRARY} does not list oneDNN; is this libkiln?\n${out}")
endif()
foreach(forbidden libpq libsqlite3 libssl libcrypto libgloo libcpp-httplib)
  if(out MATCHES "${forbidden}[.-]")
    message(FATAL_ERROR "libkiln loads ${forbidden}, which belongs to serve, distributed or studio's library:\n${out}")
  endif()
endforeach()
message(STATUS "libkiln loads none of libpq, SQLite, OpenSSL, Gloo or cpp-httplib")
