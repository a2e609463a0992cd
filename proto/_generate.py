"""Regenerate the Python modules of ``dstp.proto`` from ``proto/dstp.proto``.

Run ``python proto/_generate.py`` from the repository root after editing
the .proto; ``tests/proto/test_generated.py`` fails while the checked-in
modules are stale. Needs grpcio-tools (a test dependency).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

GENERATED = ("dstp_pb2.py", "dstp_pb2.pyi", "dstp_pb2_grpc.py")


def generate(proto_dir: Path, out_dir: Path) -> list[Path]:
    """Compile ``proto_dir/dstp.proto`` into ``out_dir``; return the files written."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        # The virtual path dstp/proto/ makes generated imports `from dstp.proto import dstp_pb2`.
        args = [
            "grpc_tools.protoc",
            f"-Idstp/proto={proto_dir}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            "dstp/proto/dstp.proto",
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on dstp.proto")
        written = []
        for name in GENERATED:
            target = out_dir / name
            shutil.copyfile(Path(tmp) / "dstp" / "proto" / name, target)
            written.append(target)
        return written


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    for path in generate(root, root):
        print(f"wrote {path}")
