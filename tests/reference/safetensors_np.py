"""safetensors reader and writer for the NumPy reference scripts (written from the format's published layout: u64
little-endian header length, JSON header, data section), sharing no code with lowbit's C++ reader."""
import json
import struct

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "I16": np.int16, "I8": np.int8, "U8": np.uint8}
# Types NumPy has no float for, read as their stored integers.
RAW = dict(DTYPES, **{"BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8})


def read_safetensors_raw(path):
    """name -> (dtype string, array of its shape); BF16 and F8 kept as their stored integers."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[base + b:base + e], dtype=RAW[info["dtype"]])
        out[name] = (info["dtype"], arr.reshape(info["shape"]))
    return out


def read_safetensors(path):
    """Every tensor of the file as a NumPy array of its shape; BF16 is widened to float32 exactly."""
    out = {}
    for name, (dt, arr) in read_safetensors_raw(path).items():
        out[name] = (arr.astype(np.uint32) << 16).view(np.float32) if dt == "BF16" else arr
    return out


def write_safetensors(path, tensors):
    """name -> array, written as F32 tensors (names sorted, header padded to 8 bytes)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
