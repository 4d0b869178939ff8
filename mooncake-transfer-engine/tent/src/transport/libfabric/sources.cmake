# libfabric transport: the library is loaded at run time (dlopen), so only
# its headers are needed to build it (Debian libfabric-dev).  Without them
# the transport is left out of the build.
find_path(TENT_LIBFABRIC_INCLUDE rdma/fabric.h)
if(TENT_LIBFABRIC_INCLUDE)
  include_directories(${TENT_LIBFABRIC_INCLUDE})
  list(APPEND TENT_SOURCES
    src/transport/libfabric/libfabric_api.c
    src/transport/libfabric/libfabric_pair.c
    src/transport/libfabric/libfabric_transport.c)
  set(TENT_XPORT_BUILT TRUE)
else()
  message(STATUS "tent: rdma/fabric.h not found; the libfabric transport is not built")
endif()
