#!/bin/sh
# libmf_smem.so (mf_host) must export exactly the 13 smem_* symbols of the
# ABI and mf_host's two key extensions (smem_trans_ext_*), nothing else.  Usage: check_exports.sh path/to/libmf_smem.so
set -eu
lib=$1
want="smem_set_log_level
smem_trans_batch_copy
smem_trans_batch_register_mem
smem_trans_batch_status_query
smem_trans_config_init
smem_trans_create
smem_trans_deregister_mem
smem_trans_destroy
smem_trans_ext_batch_copy_keyed
smem_trans_ext_register_mem_keyed
smem_trans_get_rpc_port
smem_trans_init
smem_trans_register_mem
smem_trans_set_peer_down_callback
smem_trans_uninit"
got=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sort)
if [ "$got" != "$want" ]; then
    echo "exported symbols of $lib differ from the smem_trans ABI:"
    echo "--- want"; echo "$want"
    echo "--- got"; echo "$got"
    exit 1
fi
echo "ok: $lib exports exactly the 13 smem_* symbols and 2 extensions"
