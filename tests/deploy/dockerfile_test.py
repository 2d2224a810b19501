#!/usr/bin/env python3
"""Static checks of deploy/Dockerfile and its ignore file: no Docker here, so this checks what
can go wrong without building. Pinned base images (build and runtime of the same CUDA), pinned
NCCL and EFA installer versions, every package of scripts/setup.sh either installed in the
build stage or named as deliberately left out, a Release/Ninja build without -march=native,
the EFA installer's container flags, the binary and entrypoint copied where the manifests
expect them, ENTRYPOINT/CMD, the EFA environment defaults, and a build context that keeps the
sources but not local build trees. Standard library only. Prints "N passed, M failed"; exits
non-zero when anything failed.
"""

import fnmatch
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"
SETUP = ROOT / "scripts" / "setup.sh"

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from checks import Checks  # noqa: E402  (tests/common, shared by the Python tests)

CHECKS = Checks()
check = CHECKS.check


def instructions(text):
    """(keyword, arguments) per instruction, continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue  # a comment inside a continued instruction
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        kw, _, args = cur.partition(" ")
        out.append((kw.upper(), args.strip()))
        cur = ""
    return out


def setup_packages():
    text = SETUP.read_text()
    block = re.search(r"PACKAGES=\((.*?)\n\)", text, re.S)
    if not block:
        return []
    pkgs = []
    for line in block.group(1).splitlines():
        pkgs += line.split("#", 1)[0].split()
    return pkgs


def main():
    text = DOCKERFILE.read_text()
    ins = instructions(text)
    froms = [(i, a) for i, (k, a) in enumerate(ins) if k == "FROM"]
    global_args = dict(re.match(r"(\w+)=(.*)", a).groups() for k, a in ins[: froms[0][0]]
                       if k == "ARG" and "=" in a) if froms else {}

    check("global ARG CUDA_VERSION pinned to X.Y.Z",
          re.fullmatch(r"\d+\.\d+\.\d+", global_args.get("CUDA_VERSION", "")) is not None,
          f"{global_args}")
    check("global ARG UBUNTU_VERSION pinned",
          re.fullmatch(r"\d+\.\d+", global_args.get("UBUNTU_VERSION", "")) is not None,
          f"{global_args}")
    check("two stages", len(froms) == 2, f"{[a for _, a in froms]}")
    if len(froms) != 2:
        CHECKS.summary()
        return 1
    build_from, runtime_from = froms[0][1], froms[1][1]
    check("build stage: the CUDA cuDNN devel image, named build",
          build_from == "nvidia/cuda:${CUDA_VERSION}-cudnn-devel-ubuntu${UBUNTU_VERSION} AS build",
          build_from)
    check("runtime stage: the matching CUDA cuDNN runtime image",
          runtime_from.startswith("nvidia/cuda:${CUDA_VERSION}-cudnn-runtime-ubuntu${UBUNTU_VERSION}"),
          runtime_from)
    check("no :latest anywhere", ":latest" not in text.replace("never rely on :latest", ""))

    build = ins[froms[0][0] + 1: froms[1][0]]
    runtime = ins[froms[1][0] + 1:]
    rt_args = dict(re.match(r"(\w+)=(.*)", a).groups() for k, a in runtime if k == "ARG" and "=" in a)
    check("ARG NCCL_VERSION pinned", re.fullmatch(r"\d+\.\d+\.\d+", rt_args.get("NCCL_VERSION", "")) is not None,
          f"{rt_args}")
    check("ARG EFA_INSTALLER_VERSION pinned",
          re.fullmatch(r"\d+\.\d+\.\d+", rt_args.get("EFA_INSTALLER_VERSION", "")) is not None, f"{rt_args}")

    # Every package scripts/setup.sh installs is either installed by the build stage or named in
    # the Dockerfile's "Left out" comment: the image's build mirrors the repository's.
    build_runs = " ".join(a for k, a in build if k == "RUN")
    installed = set()
    for m in re.finditer(r"apt-get install ((?:[^&]|&(?!&))*)", build_runs):
        installed |= {w for w in m.group(1).split() if not w.startswith("-")}
    left_out = re.search(r"Left out.*?:(.*?)\n(?!#)", text, re.S)
    left_out = set(re.sub(r"[#\n]", " ", left_out.group(1)).replace(".", " ").split()) if left_out else set()
    pkgs = setup_packages()
    check("scripts/setup.sh's package list found", len(pkgs) >= 10, f"{pkgs}")
    missing = [p for p in pkgs if p not in installed and p not in left_out]
    check("every setup.sh package is installed in the build stage or documented as left out",
          not missing, f"neither installed nor left out: {missing}")
    needed = {"libopenblas-openmp-dev", "libyaml-cpp-dev", "libgloo-dev", "libspdlog-dev",
              "libfmt-dev", "libpcre2-dev", "libutf8proc-dev", "cmake", "ninja-build"}
    check("build stage installs kiln's libraries and tools", needed <= installed,
          f"missing {sorted(needed - installed)}")

    check("build: CMake with Ninja, Release", "-G Ninja" in build_runs
          and "-DCMAKE_BUILD_TYPE=Release" in build_runs, build_runs[:200])
    check("build: no -march=native (KILN_NATIVE=OFF)", "-DKILN_NATIVE=OFF" in build_runs)
    check("build: tests and benchmarks off, nothing run", "-DKILN_BUILD_TESTS=OFF" in build_runs
          and "ctest" not in build_runs and "demo.sh" not in build_runs)
    check("build: the kiln target", "--target kiln" in build_runs)

    runtime_runs = " ".join(a for k, a in runtime if k == "RUN")
    efa = re.search(r"efa_installer\.sh([^&]*)", runtime_runs)
    flags = efa.group(1).split() if efa else []
    check("runtime: EFA installer in container mode",
          {"-y", "--skip-kmod", "--skip-limit-conf", "--no-verify"} <= set(flags), f"{flags}")
    check("runtime: EFA installer tarball of the pinned version",
          "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" in runtime_runs)
    check("runtime: the OFI plugin and libfabric verified present",
          "libnccl-net-ofi.so" in runtime_runs and "libfabric.so" in runtime_runs)
    check("runtime: libnccl2 at the pinned version", "libnccl2=${NCCL_VERSION}" in runtime_runs)
    check("runtime: the build fails on a missing shared library", "not found" in runtime_runs)

    copies = [a for k, a in runtime if k == "COPY"]
    check("runtime: kiln copied to /usr/local/bin/kiln",
          "--from=build /build/bin/kiln /usr/local/bin/kiln" in copies, f"{copies}")
    check("runtime: entrypoint copied to /usr/local/bin/kiln-entrypoint",
          "deploy/entrypoint.sh /usr/local/bin/kiln-entrypoint" in copies, f"{copies}")
    check("deploy/entrypoint.sh exists and is executable",
          os.access(ROOT / "deploy" / "entrypoint.sh", os.X_OK))

    env_text = " ".join(a for k, a in runtime if k == "ENV")
    for kv in ("FI_PROVIDER=efa", "FI_EFA_USE_DEVICE_RDMA=1", "NCCL_SOCKET_IFNAME=^lo,docker",
               "NCCL_DEBUG=WARN"):
        check(f"runtime: ENV {kv}", kv in env_text.split(), env_text)

    entry = [a for k, a in runtime if k == "ENTRYPOINT"]
    cmd = [a for k, a in runtime if k == "CMD"]
    check("ENTRYPOINT [\"kiln-entrypoint\"]", len(entry) == 1 and json.loads(entry[0]) == ["kiln-entrypoint"],
          f"{entry}")
    check("CMD [\"kiln\", \"--help\"]", len(cmd) == 1 and json.loads(cmd[0]) == ["kiln", "--help"], f"{cmd}")

    # The build context: BuildKit reads deploy/Dockerfile.dockerignore for -f deploy/Dockerfile.
    if check("deploy/Dockerfile.dockerignore exists", IGNORE.exists()):
        patterns = [l.strip() for l in IGNORE.read_text().splitlines()
                    if l.strip() and not l.strip().startswith("#")]

        def ignored(path):
            parts = path.split("/")
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            return any(fnmatch.fnmatchcase(p, pat.replace("**/", "")) or fnmatch.fnmatchcase(p, pat)
                       for pat in patterns if not pat.startswith("!") for p in prefixes)

        for path in (".git/config", "build/CMakeCache.txt", "build-gl/bin/kiln", "runs/demo/x"):
            check(f"context excludes {path}", ignored(path))
        for path in ("CMakeLists.txt", "src/kiln/cli/main.cc", "src/kiln/cli/CMakeLists.txt",
                     "examples/custom_train.cc", "deploy/entrypoint.sh", "scripts/build.sh"):
            check(f"context keeps {path}", not ignored(path))

    return CHECKS.summary()


if __name__ == "__main__":
    sys.exit(main())
