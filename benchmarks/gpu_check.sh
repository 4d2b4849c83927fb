#!/bin/sh
# The checks that need a GPU, in one run (a few minutes on one GPU): the copy-plan tests that
# need CUDA (a GPU's KV cache to and from host pages, pinned or not, and device pages), copy
# plans on the device and across to pinned host pages against plain copies, and `layoutalg
# reshard --device cuda` through canonical pages and direct (one GPU: the ranks share it and
# the group runs gloo through host memory; a GPU a rank: NCCL). Every check runs even where
# one before it failed; the last line names those that failed. From the repository root,
# where torch sees CUDA and layoutalg is importable:
#     sh benchmarks/gpu_check.sh
export PYTHONUNBUFFERED=1
failed=""
check() {  # a named step: its output, then whether it passed
    name=$1; shift
    echo "== $name"
    "$@" || failed="$failed $name"
}
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.device_count(), 'x', torch.cuda.get_device_name())" || exit 1
check tests python3 -m pytest -q -p no:cacheprovider tests/test_copy_devices.py tests/test_copy_plan.py \
    tests/test_layer_tensors.py tests/test_copy_refusals.py
check copy_bench python3 benchmarks/copy_bench.py --device cuda
check copy_bench_big python3 benchmarks/copy_bench.py --device cuda --blocks 8192  # a call's fixed cost spread
R="python3 -m layoutalg reshard --blocks 64 --layers 2 --device cuda"
check hnd_4_2 $R --family split_hnd --store tp=4 --load tp=2 --heads 8
check hnd_4_2_direct $R --family split_hnd --store tp=4 --load tp=2 --heads 8 --direct
check nhd_8_2_direct $R --family split_nhd --store tp=8 --load tp=2 --heads 4 --direct
check flash_2_4_direct $R --family flash_nhd --store tp=2 --load tp=4 --heads 8 --size kv_blocks_second=1 --direct
check mla_dcp $R --family mla --store tp=2 --load tp=2,dcp=2 --head-size 576
check mla_dcp_direct $R --family mla --store tp=2 --load tp=2,dcp=2 --head-size 576 --direct
if [ -n "$failed" ]; then echo "gpu_check: failed:$failed"; exit 1; fi
echo "gpu_check: all passed"
