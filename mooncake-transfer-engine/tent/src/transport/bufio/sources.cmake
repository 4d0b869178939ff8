# Buffered file transport: pread/pwrite on worker threads, no dependency.
list(APPEND TENT_SOURCES src/transport/bufio/bufio_transport.c)
if(NOT src/transport/file_io.c IN_LIST TENT_SOURCES)
  list(APPEND TENT_SOURCES src/transport/file_io.c)
endif()
set(TENT_XPORT_BUILT TRUE)
