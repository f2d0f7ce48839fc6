"""Fashion-MNIST's IDX files as the peers read them (torch_convnet.py, tf_sync_replicas.py).

The files syncfac reads (runtime/data/idx.cpp): per split
`{prefix}-images-idx3-ubyte` (n x 28 x 28 unsigned bytes) and
`{prefix}-labels-idx1-ubyte` (n), gzipped or plain, in one folder. This
module checks them and hands back the raw bytes with their count; each
peer makes its own arrays of them (numpy for TensorFlow, torch tensors for
PyTorch), so it needs the standard library only. Bad data raises BadData
with a message naming the file or folder, and the flag to change.
"""
import gzip
import math
import os
import struct

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"


class BadData(Exception):
    """A data file the peers cannot read; the message names it."""


def read_idx(data_dir, stem):
    """The IDX file `stem` of `data_dir` (gzipped or plain): its dimensions and its data bytes."""
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            break
    else:
        raise BadData(f"data file {os.path.join(data_dir, stem)}[.gz] not found (--data_dir)")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4:
        raise BadData(f"data file {path}: too short for an IDX header")
    magic, = struct.unpack(">I", raw[:4])
    ndim, kind = magic & 0xFF, (magic >> 8) & 0xFF
    if kind != 0x08 or ndim == 0:
        raise BadData(f"data file {path}: not IDX unsigned-byte data (magic {magic:#x})")
    if len(raw) < 4 + 4 * ndim:
        raise BadData(f"data file {path}: too short for its {ndim} dimensions")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    body = raw[4 + 4 * ndim:]
    if len(body) != math.prod(dims):
        raise BadData(f"data file {path}: {len(body)} bytes of data, header says {math.prod(dims)}")
    return dims, body


def read_split(data_dir, prefix):
    """One split ("train", "t10k"): (n, the n x 28 x 28 image bytes, the n label bytes)."""
    image_dims, images = read_idx(data_dir, f"{prefix}-images-idx3-ubyte")
    label_dims, labels = read_idx(data_dir, f"{prefix}-labels-idx1-ubyte")
    if len(image_dims) != 3 or image_dims[1:] != (28, 28) or label_dims != image_dims[:1]:
        raise BadData(f"data in {data_dir}: {prefix} images {image_dims} and labels "
                      f"{label_dims} are not n x 28 x 28 and n")
    return image_dims[0], images, labels
