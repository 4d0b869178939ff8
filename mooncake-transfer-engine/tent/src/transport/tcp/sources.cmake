list(APPEND TENT_SOURCES src/transport/tcp/tcp_transport.c src/transport/tcp/tcp_target.c)
set(TENT_XPORT_BUILT TRUE)
