#!/usr/bin/env python3
"""No include points above its layer.

The layer order is the table in docs/architecture.md ("## Layers"), bottom first. Every
#include "kiln/<layer>/..." in src/kiln/<layer>/ must name the same layer or one listed before
it. Above kernels/, no file includes a backend's own headers (kiln/kernels/cpu/, .../cuda/): only
make_backend (kernels/device/backend.h) names a backend; the device abstraction
(kiln/kernels/device/) and ops.h are open to every layer above. One exception: the NCCL
communicator (src/kiln/comm/nccl_*), built only with CUDA, orders its own CUDA stream with CUDA
events and so includes kiln/kernels/cuda/ (cuda_stream.h, cuda_check.h).

Usage: layers_test.py SOURCE_DIR          (exit 0: clean, 1: violations, each printed)
       layers_test.py --self-test         (checks that a planted violation is found)
"""
import re
import sys
import tempfile
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"kiln/([a-z_]+)/([^"]+)"', re.M)
ROW = re.compile(r"^\|\s*`([a-z_]+)/`\s*\|", re.M)


def layer_order(root: Path) -> list:
    text = (root / "docs/architecture.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    return ROW.findall(section)


def nccl_uses_cuda(layer: str, path: Path, rest: str) -> bool:
    return layer == "comm" and path.name.startswith("nccl_") and rest.startswith("cuda/")


def violations(root: Path) -> list:
    order = layer_order(root)
    if not order:
        return ["docs/architecture.md: no layer table under '## Layers'"]
    rank = {name: i for i, name in enumerate(order)}
    out = []
    src = root / "src/kiln"
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cc", ".cu", ".cuh") or not path.is_file():
            continue
        layer = path.relative_to(src).parts[0]
        if layer not in rank:
            out.append(f"{path.relative_to(root)}: folder '{layer}/' is not in the layer table")
            continue
        for m in INCLUDE.finditer(path.read_text(errors="replace")):
            target, rest = m.group(1), m.group(2)
            line = path.read_text(errors="replace")[: m.start()].count("\n") + 1
            where = f"{path.relative_to(root)}:{line}"
            if target not in rank:
                out.append(f"{where}: includes kiln/{target}/, not a layer")
            elif rank[target] > rank[layer]:
                out.append(f"{where}: {layer}/ includes kiln/{target}/{rest}, a layer above it")
            elif (layer != "kernels" and target == "kernels" and rest.split("/")[0] in ("cpu", "cuda")
                  and not nccl_uses_cuda(layer, path, rest)):
                out.append(f"{where}: {layer}/ includes a backend's header kiln/kernels/{rest} "
                           "(use kernels/device/backend.h)")
    return out


def self_test() -> int:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "docs").mkdir()
        (root / "docs/architecture.md").write_text(
            "## Layers\n\n| layer |\n|---|\n| `base/` | x |\n| `kernels/` | x |\n| `model/` | x |\n")
        for layer, text in {"base/a.h": '#include "kiln/model/m.h"\n',
                            "model/m.h": '#include "kiln/kernels/cpu/cpu_backend.h"\n',
                            "model/c.h": '#include "kiln/kernels/cuda/cuda_stream.h"\n',
                            "model/d.h": '#include "kiln/kernels/device/backend.h"\n',
                            "kernels/k.h": '#include "kiln/base/a.h"\n'}.items():
            p = root / "src/kiln" / layer
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        found = violations(root)
        # model/d.h (kernels/device/) is allowed; cpu/ and cuda/ are not.
        ok = (len(found) == 3 and "a layer above it" in found[0]
              and all("backend's header" in f for f in found[1:]))
        print("\n".join(found))
        print("self-test", "passed" if ok else "FAILED")
        return 0 if ok else 1


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = Path(sys.argv[1])
    found = violations(root)
    for v in found:
        print(v)
    print(f"layers: {len(layer_order(root))} layers, {len(found)} violation(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
