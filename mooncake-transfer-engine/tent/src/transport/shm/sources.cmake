list(APPEND TENT_SOURCES src/transport/shm/shm_transport.c src/transport/shm/shm_handle.c
  src/transport/shm/shm_ctl.c)
set(TENT_XPORT_BUILT TRUE)
