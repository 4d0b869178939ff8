list(APPEND TENT_SOURCES src/transport/tcp/tcp_transport.c)
list(APPEND TENT_DEFS TENT_WITH_TCP)
