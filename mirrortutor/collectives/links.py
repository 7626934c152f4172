"""The interconnects the cost model knows: cited peak figures, and what real rings reach.

Numbers only (no formulas, nothing imported): :mod:`~mirrortutor.collectives.costmodel` turns each
row into an :class:`~mirrortutor.collectives.costmodel.Interconnect`.

**Peak, not achieved.** Every bandwidth in ``LINKS`` is the theoretical peak of the link, *per
direction*, on a link each rank has to itself: what a datasheet or a standard states. Real rings
reach less (protocol overhead, PCIe switches, the CPU's memory system), so ``MEASURED`` gives, where
a public measurement exists, the bus bandwidth nccl-tests' ``all_reduce_perf`` reported on such a
system (busbw is comparable to link speed; nccl-tests ``doc/PERFORMANCE.md``). Latencies are
assumptions, each with its source.
"""

from __future__ import annotations

__all__ = ["LINKS", "MEASURED"]

_NCCL_LAT = ("latency: assumption, the per-step hardware latency NCCL's own tuner uses for "
             "Ring/Simple (hwLat table in NVIDIA/nccl src/graph/tuning.cc; NCCL 2.x, varies by "
             "release)")


_PCI = _NCCL_LAT + ", PCI 5.7 us"
_NVLINK = _NCCL_LAT + ", NVLink 3.4 us"
_TCP = "latency: assumption, ~10-50 us through a kernel TCP stack"
_VERBS = "latency: assumption, ~1-2 us typical small-message MPI/verbs latency"

#: name: (bandwidth per direction, its unit, alpha in seconds, where the bandwidth comes from)
LINKS = {
    "pcie3-x16": (15.75, "GB/s", 5.7e-6, "PCI-SIG PCI Express Base Spec 3.0, 8 GT/s x16 lanes, "
                  "128b/130b encoding = 15.75 GB/s per direction; " + _PCI),
    "pcie4-x16": (31.5, "GB/s", 5.7e-6, "PCI-SIG PCI Express Base Spec 4.0, 16 GT/s x16 = 31.5 GB/s "
                  "per direction; " + _PCI),
    "pcie5-x16": (63.0, "GB/s", 5.7e-6, "PCI-SIG PCI Express Base Spec 5.0, 32 GT/s x16 = 63 GB/s per "
                  "direction; " + _PCI),
    "nvlink2-v100": (150.0, "GB/s", 3.4e-6, "NVIDIA Tesla V100 datasheet / Volta whitepaper, 300 GB/s "
                     "total over 6 NVLink 2 links = 150 GB/s per direction (DGX-1's hybrid cube mesh "
                     "gives one ring fewer links); " + _NVLINK),
    "nvlink3-a100": (300.0, "GB/s", 3.4e-6, "NVIDIA A100 Tensor Core GPU Architecture whitepaper "
                     "(2020), 600 GB/s total over 12 NVLink 3 links = 300 GB/s per direction; "
                     + _NVLINK),
    "nvlink4-h100": (450.0, "GB/s", 3.4e-6, "NVIDIA H100 Tensor Core GPU Architecture whitepaper "
                     "(2022), 900 GB/s total over 18 NVLink 4 links = 450 GB/s per direction; "
                     + _NVLINK),
    "ib-hdr": (200.0, "Gb/s", 2e-6, "InfiniBand HDR 4x port, 200 Gb/s per direction (IBTA roadmap; "
               "NVIDIA ConnectX-6) = 25 GB/s; " + _VERBS + " (NCCL's tuner uses 9.6 us per network "
               "step)"),
    "ib-ndr": (400.0, "Gb/s", 2e-6, "InfiniBand NDR 4x port, 400 Gb/s per direction (IBTA roadmap; "
               "NVIDIA ConnectX-7) = 50 GB/s; " + _VERBS),
    "eth-10g": (10.0, "Gb/s", 25e-6, "IEEE 802.3ae 10 GbE = 1.25 GB/s per direction; " + _TCP),
    "eth-25g": (25.0, "Gb/s", 25e-6, "IEEE 802.3by 25 GbE = 3.125 GB/s per direction; " + _TCP),
    "eth-100g": (100.0, "Gb/s", 25e-6, "IEEE 802.3ba 100 GbE = 12.5 GB/s per direction; " + _TCP
                 + " (RoCE is lower)"),
}

#: name: (bus bandwidth an 8-GPU nccl-tests all_reduce_perf reached, bytes/s; the measurement)
MEASURED = {
    "pcie5-x16": (28e9, "8 x RTX 5090 on PCIe 5.0, all_reduce_perf -g 8, 1-8 GB messages: busbw "
                  "28 GB/s (NVIDIA/nccl issue #1639, 2025; NCCL's maintainer: on PCI systems the "
                  "CPU's memory system sets the limit)"),
    "nvlink3-a100": (200e9, "8 x A100-SXM4-80GB over NVLink 3, all_reduce_perf up to 1 GB: busbw "
                     "~200 GB/s (NVIDIA/nccl-tests issue #149, 2023)"),
    "nvlink4-h100": (370e9, "8 x H100 over NVLink 4 with the ring algorithm: ~370 GB/s effective "
                     "after ~20% protocol overhead (NCCL's maintainer, NVIDIA/nccl-tests issue "
                     "#212, 2024)"),
}
