"""The NVIDIA software stack on a node: what the nvidia and nccl stages decide and check.

The roles gather raw output on the node (nvidia-smi -q -x, dpkg-query, gpg, dkms logs) and hand
it to these functions through the filter shim playbooks/filter_plugins/kiln_gpu_filters.py, so
every decision is plain, unit-tested Python:

- facts:    `nvidia-smi -q -x` (or plain `-q`) as a compact per-GPU summary, and the verdict on it
- rails:    `nvidia-smi topo -m` against the declared rails: is each HCA next to its GPU?
- packages: which driver action a node needs, the packages to pin, hold and install
- trust:    the signing key of a package repository against its pinned fingerprint
"""
