list(APPEND TENT_SOURCES src/transport/shm/shm_transport.c)
list(APPEND TENT_DEFS TENT_WITH_SHM)
