# MemFabric transport: loads libmf_smem.so at run time, so nothing from the
# vendor is needed to build it.
if(USE_MEMFABRIC)
  list(APPEND TENT_SOURCES
    src/transport/memfabric/memfabric_api.c
    src/transport/memfabric/memfabric_transport.c)
  set(TENT_XPORT_BUILT TRUE)
endif()
