"""Rewrites kernels/cuda for the CPU emulation (see emu.h): each .cu becomes a .cpp that includes
emu.h, `kernel<<<cfg>>>(args)` (also `kernel<T><<<`, `kernel<T, N><<<`, also in .cuh files) becomes `emu::launch(kernel, emu::cfg(cfg), args)`, dynamic
shared memory comes from the emulator, and common.cuh exposes its device helpers to g++.

usage: gen.py <repo root> <output dir>   (writes <output dir>/kernels/cuda/*)
"""
import glob
import os
import re
import sys

root, out = sys.argv[1], sys.argv[2]
dst = os.path.join(out, "kernels", "cuda")
os.makedirs(dst, exist_ok=True)
for path in glob.glob(os.path.join(root, "kernels", "cuda", "*")):
    text = open(path).read()
    name = os.path.basename(path)
    if name.endswith(".cu") or (name.endswith(".cuh") and "<<<" in text):
        text = re.sub(r"(\w+(?:<[\w, ]+>)?)<<<", r"emu::launch(\1, emu::cfg(", text)
        text = text.replace(">>>(", "), ")
        text = text.replace("extern __shared__ float smem[];", "float* smem = emu::dynamic_smem();")
    if name.endswith(".cu"):
        text = '#include "emu.h"\n' + text
        name = name[:-3] + ".cpp"
    elif name == "common.cuh":
        text = text.replace("#ifdef __CUDACC__", "#if 1  // emulation: device helpers for g++")
        text = text.replace("#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())",
                            "#define CUDA_CHECK_LAUNCH() do {} while (0)")
    with open(os.path.join(dst, name), "w") as f:
        f.write(text)
