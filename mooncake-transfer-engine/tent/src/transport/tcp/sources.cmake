list(APPEND TENT_SOURCES src/transport/tcp/tcp_transport.c src/transport/tcp/tcp_target.c src/transport/tcp/tcp_conn.c
  src/transport/tcp/tcp_fence.c src/transport/tcp/tcp_wire.c)
set(TENT_XPORT_BUILT TRUE)
