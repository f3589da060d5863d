"""Several processes: the launcher, all-reduce benchmark, DDP variants, optimizer-state sharding and
FSDP. Gloo on the CPU and NCCL on GPUs run the same code."""
