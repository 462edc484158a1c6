"""A small reader and writer for the ``.safetensors`` file format.

Layout of a file: an 8-byte little-endian unsigned header length ``n``; ``n`` bytes of UTF-8 JSON
mapping each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative
to the first byte after the header) plus an optional ``"__metadata__"`` map of strings; then the
raw little-endian tensor bytes, row-major.
"""

from __future__ import annotations

import json
import struct
from typing import BinaryIO, Dict, Mapping, Optional, Tuple

import torch

# safetensors dtype name <-> torch dtype.
_DTYPES: Dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_NAMES: Dict[torch.dtype, str] = {v: k for k, v in _DTYPES.items()}

# Header sizes beyond this are refused (the reference implementation's limit is 100 MB).
_MAX_HEADER = 100 * 1024 * 1024


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    """Raw row-major bytes of a CPU tensor (bfloat16 goes through an int16 view for NumPy)."""
    t = tensor.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def save_file(tensors: Mapping[str, torch.Tensor], path: str,
              metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes ``tensors`` (name -> tensor) to ``path`` in the safetensors format."""
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name]
        if tensor.dtype not in _NAMES:
            raise ValueError(f"{name}: dtype {tensor.dtype} has no safetensors name")
        blob = _tensor_bytes(tensor)
        header[name] = {"dtype": _NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_header(path: str) -> Tuple[Dict[str, dict], Dict[str, str], int]:
    """Returns (tensor entries, metadata, byte offset of the data section) of a file."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) != 8:
            raise ValueError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", prefix)
        if n > _MAX_HEADER:
            raise ValueError(f"{path}: header length {n} is too large")
        raw = f.read(n)
    if len(raw) != n:
        raise ValueError(f"{path}: truncated header")
    header = json.loads(raw.decode("utf-8"))
    metadata = header.pop("__metadata__", None) or {}
    return header, metadata, 8 + n


def load_file(path: str) -> Dict[str, torch.Tensor]:
    """Reads every tensor of a safetensors file (into memory, as CPU tensors, one copy)."""
    header, _, data_start = read_header(path)
    tensors: Dict[str, torch.Tensor] = {}
    with open(path, "rb") as f:
        f.seek(0, 2)
        data_len = f.tell() - data_start
        for name, entry in header.items():
            tensors[name] = _read_tensor(f, name, entry, data_start, data_len)
    return tensors


def load_metadata(path: str) -> Dict[str, str]:
    """The ``__metadata__`` map of a file (empty when absent)."""
    return read_header(path)[1]


def _read_tensor(f: BinaryIO, name: str, entry: dict, data_start: int,
                 data_len: int) -> torch.Tensor:
    """One tensor, read from its header entry's byte range of the data section."""
    dtype = _DTYPES.get(entry.get("dtype", ""))
    if dtype is None:
        raise ValueError(f"{name}: unsupported dtype {entry.get('dtype')!r}")
    shape = [int(s) for s in entry["shape"]]
    begin, end = (int(o) for o in entry["data_offsets"])
    numel = 1
    for s in shape:
        numel *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    if not 0 <= begin <= end <= data_len or end - begin != numel * itemsize:
        raise ValueError(f"{name}: data_offsets {begin}..{end} do not match shape {shape}")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    buffer = bytearray(end - begin)
    f.seek(data_start + begin)
    if f.readinto(buffer) != len(buffer):
        raise ValueError(f"{name}: file truncated")
    return torch.frombuffer(buffer, dtype=dtype).reshape(shape)
