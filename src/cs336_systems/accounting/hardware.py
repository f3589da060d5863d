"""Accelerator constants the accounting uses, each with where it comes from.

Units: bytes, FLOP/s and bytes/s; GB means 10^9 bytes throughout (as the datasheets and C9 do).
``link_bandwidth`` is the bandwidth one device's collectives can use in the ring model of
``parallelism``: a device sends and receives at this rate at the same time.
"""
from __future__ import annotations

from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class Accelerator:
    name: str
    hbm_bytes: float        # device memory
    bf16_flops: float       # dense peak, FLOP/s
    link_bandwidth: float   # bytes/s a device's collectives move (see each constant for its meaning)
    source: str
    fp32_flops: float | None = None    # dense fp32 on the CUDA cores (no tensor cores), FLOP/s
    tf32_flops: float | None = None    # dense TF32 on the tensor cores (fp32 matmuls with TF32 allowed)
    # Device memory bandwidth, bytes/s (datasheets: H100 SXM5 HBM3 3.35 TB/s, H200 SXM HBM3e 4.8 TB/s);
    # B5 bounds what a cold L2 cache can add to a timed call with it.
    hbm_bandwidth: float | None = None
    # Special-function operations a second (exp2, reciprocal, log2, sin, cos on the SFUs): the rate
    # an elementwise exp runs at, far below the fp32 lanes' (``fp32_flops`` counts an FMA as 2).
    special_function_ops: float | None = None


# Per SM per clock on compute capability 9.0 (CUDA C++ Programming Guide, "Arithmetic Instructions",
# throughput table): 128 fp32 add, multiply or multiply-add results, 16 of exp2, reciprocal, log2,
# sin or cos. ``fp32_flops`` counts 2 FLOPs a multiply-add, so the SFUs' rate is fp32_flops / 2 / 8.
HOPPER_FP32_LANES_PER_SFU = 128 / 16


# TPU v5p with the numbers C9(c) prescribes. W_ici = 2 * 9e10 B/s is the bandwidth of one ICI mesh
# axis counting both directions of its wrap-around ring, which is how "How to Scale Your Model"
# (Austin et al., jax-ml.github.io/scaling-book, parts 2 and 5) counts it; the book lists
# C = 4.59e14 bf16 FLOP/s and 95 GB of HBM per chip.
TPU_V5P = Accelerator(
    name="TPU v5p", hbm_bytes=95 * GB, bf16_flops=4.6e14, link_bandwidth=2 * 9e10,
    source="DELIVERABLES C9(c); How to Scale Your Model (jax-ml.github.io/scaling-book), TPU v5p table",
)

# H100 SXM5 80 GB (NVIDIA H100 Tensor Core GPU datasheet): 989 TFLOP/s dense bf16 (the datasheet's
# 1,979 counts 2:4 sparsity), NVLink 4 at 900 GB/s bidirectional = 450 GB/s each way. A ring
# collective sends and receives at the same time, so the one-way 450 GB/s is its rate. fp32 on the
# CUDA cores: 67 TFLOP/s; TF32 tensor cores: 494.5 dense (the datasheet's 989 counts sparsity).
H100_SXM = Accelerator(
    name="H100 SXM", hbm_bytes=80 * GB, bf16_flops=989e12, link_bandwidth=450 * GB,
    source="NVIDIA H100 Tensor Core GPU datasheet (SXM5): 80 GB HBM3, 989 TFLOP/s dense bf16, "
           "494.5 dense TF32, 67 fp32, NVLink 900 GB/s",
    fp32_flops=67e12, tf32_flops=494.5e12, hbm_bandwidth=3.35e12,
    special_function_ops=67e12 / 2 / HOPPER_FP32_LANES_PER_SFU,
)

# H200 SXM (NVIDIA H200 Tensor Core GPU datasheet): the H100's compute and NVLink, 141 GB HBM3e.
H200_SXM = Accelerator(
    name="H200 SXM", hbm_bytes=141 * GB, bf16_flops=989e12, link_bandwidth=450 * GB,
    source="NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e, 989 TFLOP/s dense bf16, "
           "494.5 dense TF32, 67 fp32, NVLink 900 GB/s",
    fp32_flops=67e12, tf32_flops=494.5e12, hbm_bandwidth=4.8e12,
    special_function_ops=67e12 / 2 / HOPPER_FP32_LANES_PER_SFU,
)

# The card a record ran on, by the name ``torch.cuda.get_device_name`` gave its provenance. The H100
# SXM5 calls itself "H100 80GB HBM3" (the PCIe card is "H100 PCIe", with lower clocks and peaks, and
# is not listed); the H200 SXM "H200" (the NVL card is "H200 NVL"). A name not listed has no peak.
BY_DEVICE_NAME = {"NVIDIA H100 80GB HBM3": H100_SXM, "NVIDIA H200": H200_SXM}

# Between nodes of a DGX H100 system each GPU has its own ConnectX-7 InfiniBand NDR port:
# 400 Gb/s = 50 GB/s each way (NVIDIA DGX H100 datasheet). Used for the "8-GPU nodes" cluster.
INFINIBAND_NDR_PER_GPU = 400e9 / 8
GPUS_PER_DGX_NODE = 8


@dataclass(frozen=True)
class Cluster:
    """Devices of one kind; groups of up to ``devices_per_node`` talk over the fast link."""

    name: str
    device: Accelerator
    devices_per_node: int | None       # None: one fast domain however many devices
    inter_node_bandwidth: float | None = None

    def bandwidth(self, span: int) -> float:
        """Rate of a collective whose devices lie within ``span`` consecutive device slots.

        Nodes hold consecutive devices, so a group stays inside one node when its span does; else
        its ring crosses the slower inter-node links, and a ring is as slow as its slowest link.
        """
        if self.devices_per_node is None or span <= self.devices_per_node:
            return self.device.link_bandwidth
        return self.inter_node_bandwidth


# Every GPU on one NVLink fabric (an NVLink Switch System, up to 256 H100s in NVIDIA's DGX SuperPOD),
# extended here to any size: the best case for communication.
H100_NVLINK = Cluster("H100, all on NVLink", H100_SXM, devices_per_node=None)
# The common case: 8-GPU DGX H100 nodes, NVLink inside a node, InfiniBand NDR between nodes.
H100_DGX_IB = Cluster("H100, 8-GPU NVLink nodes + InfiniBand NDR", H100_SXM,
                      devices_per_node=GPUS_PER_DGX_NODE, inter_node_bandwidth=INFINIBAND_NDR_PER_GPU)
