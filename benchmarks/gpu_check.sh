#!/bin/sh
# The checks that need a GPU, in one run (a few minutes on one GPU): copy plans on the device
# against its plain copy, and `layoutalg reshard --device cuda` through canonical pages and
# direct (one GPU: the ranks share it and the group runs gloo through host memory; a GPU a
# rank: NCCL). Run from the repository root where torch sees CUDA and layoutalg is installed:
#     sh benchmarks/gpu_check.sh
set -e
export PYTHONUNBUFFERED=1
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.device_count(), 'x', torch.cuda.get_device_name())"
python3 benchmarks/copy_bench.py --device cuda
R="python3 -m layoutalg reshard --blocks 64 --layers 2 --device cuda"
$R --family split_hnd --store tp=4 --load tp=2 --heads 8
$R --family split_hnd --store tp=4 --load tp=2 --heads 8 --direct
$R --family split_nhd --store tp=8 --load tp=2 --heads 4 --direct
$R --family flash_nhd --store tp=2 --load tp=4 --heads 8 --size kv_blocks_second=1 --direct
$R --family mla --store tp=2 --load tp=2,dcp=2 --head-size 576
$R --family mla --store tp=2 --load tp=2,dcp=2 --head-size 576 --direct
