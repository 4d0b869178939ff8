# CTest labels for every test, so that a subset can be run by kind
# (ctest -L e2e, ctest -LE 'perf|slow') and README's test command can run
# the suite in parallel.  Each CMakeLists.txt that adds tests calls
# tent_label_tests() at its end; a test that already carries one of the
# kind labels (set where it is added) keeps it.
#   unit         one process, no server of its own, seconds
#   e2e          two engines or processes, or a server the test starts
#   conformance  the per-transport conformance suite (tests/conformance)
#   netns        builds network namespaces (root, iproute2)
#   valgrind     runs under valgrind
#   perf         timing guards that want a quiet machine (not in test.sh)
# and on top:
#   slow         the few that take longest alone (started first: COST)
#   timing       bounds on time that a crowded machine can miss: test.sh
#                runs them beside the rest, at most nproc at a time and at
#                a higher priority (scripts/run_ctest.sh)
set(TENT_TEST_KINDS unit e2e conformance netns valgrind perf)
set(TENT_SLOW_TESTS tent_py_metrics_test tent_py_torch_test
    tent_py_transfer_test tent_meta_netns_test
    tent_conformance_memfabric_host_tcp_test.test_stalled_peer
    tent_conformance_libfabric_tcp_test tebench_metrics_tcp_test
    mf_host_two_process_valgrind_test mf_host_abi_valgrind_test
    mf_host_revoke_test tent_e2e_revoke_tcp_test.test_stalled_initiator_malloc
    tent_e2e_revoke_tcp_test.test_stalled_initiator_allocated)
set(TENT_TIMING_TESTS tent_py_sigint_test tent_runtime_rpc_spin_test
    tent_e2e_rpc_robustness_test mf_host_revoke_test tent_meta_netns_test
    tent_e2e_rails_netns_down_test tent_e2e_rails_netns_far_test
    tent_e2e_rails_netns_slow_test tent_e2e_slots_tcp_test
    tent_e2e_slots_shm_test)

function(tent_label_tests)
  get_directory_property(_tests TESTS)
  foreach(t ${_tests})
    get_test_property(${t} LABELS _labels)
    if(NOT _labels)
      set(_labels "")
    endif()
    set(_have FALSE)
    foreach(k ${TENT_TEST_KINDS})
      if(k IN_LIST _labels)
        set(_have TRUE)
      endif()
    endforeach()
    set(_add "")
    if(NOT _have)
      if(t MATCHES "valgrind")
        list(APPEND _add valgrind)
      elseif(t MATCHES "netns")
        list(APPEND _add netns)
      elseif(t MATCHES "(_e2e_|two_process|peer_down|shm_map|revoke|nixl|_meta_|tent_py_|tebench_|_install_|metrics_(e2e|prometheus|promtool|slowloris)|bench_smoke|file_two)")
        list(APPEND _add e2e)
      else()
        list(APPEND _add unit)
      endif()
    endif()
    # shaped links between namespaces measure time (with slack for a busy
    # machine): one such test at a time, beside the rest of the suite
    if(t MATCHES "rails_netns")
      set_property(TEST ${t} PROPERTY RESOURCE_LOCK tent_rails_netns)
    endif()
    # tebench's runs measure for a second and want rows > 0; libfabric's
    # tcp provider progresses on its own thread within timeout_ms
    if(t IN_LIST TENT_TIMING_TESTS OR t MATCHES "^tebench_|libfabric")
      list(APPEND _add timing)
    endif()
    if(t IN_LIST TENT_SLOW_TESTS)
      list(APPEND _add slow)
      # started first by ctest -j, so that they do not finish alone
      set_property(TEST ${t} PROPERTY COST 1000)
    endif()
    if(_add)
      set_property(TEST ${t} APPEND PROPERTY LABELS ${_add})
    endif()
  endforeach()
endfunction()

# tent_split_test(NAME name TARGET target CASES case... COMMAND cmd arg...)
# adds the cmocka suite `target` as several CTest entries, so that its slow
# cases run beside the rest of the suite instead of after it: `name` runs
# every case but the named ones, and `name.case` runs each named case
# alone (tests/common/case_filter.c: TENT_TEST_SKIP, TENT_TEST_ONLY).
# Every case still runs exactly once.  Sets TENT_SPLIT_TESTS in the
# caller to the entries added, for its set_tests_properties (which must
# append to ENVIRONMENT, not set it).
function(tent_split_test)
  cmake_parse_arguments(S "" "NAME;TARGET" "CASES;COMMAND" ${ARGN})
  get_target_property(_wrapped ${S_TARGET} TENT_CASE_FILTER)
  if(NOT _wrapped)
    target_sources(${S_TARGET} PRIVATE
      ${PROJECT_SOURCE_DIR}/mooncake-transfer-engine/tent/tests/common/case_filter.c)
    target_link_options(${S_TARGET} PRIVATE
      "LINKER:--wrap=_cmocka_run_group_tests")
    set_target_properties(${S_TARGET} PROPERTIES TENT_CASE_FILTER TRUE)
  endif()
  string(REPLACE ";" "," _skip "${S_CASES}")
  add_test(NAME ${S_NAME} COMMAND ${S_COMMAND})
  set_property(TEST ${S_NAME} APPEND PROPERTY ENVIRONMENT "TENT_TEST_SKIP=${_skip}")
  set(_all ${S_NAME})
  foreach(c ${S_CASES})
    add_test(NAME ${S_NAME}.${c} COMMAND ${S_COMMAND})
    set_property(TEST ${S_NAME}.${c} APPEND PROPERTY ENVIRONMENT "TENT_TEST_ONLY=${c}")
    list(APPEND _all ${S_NAME}.${c})
  endforeach()
  set(TENT_SPLIT_TESTS ${_all} PARENT_SCOPE)
endfunction()
