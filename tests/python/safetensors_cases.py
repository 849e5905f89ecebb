"""What the checkpoint tests share: tensors of every dtype this torch has, in shapes that catch
layout mistakes, their bytes as the safetensors format stores them, and the format's dtype names,
written out here from its description (https://github.com/huggingface/safetensors) rather than
taken from the code under test."""

FORMAT_NAMES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16", "float16": "F16",
                "bfloat16": "BF16", "int32": "I32", "uint32": "U32", "float32": "F32", "complex64": "C64",
                "float64": "F64", "int64": "I64", "uint64": "U64", "float8_e5m2": "F8_E5M2",
                "float8_e4m3fn": "F8_E4M3"}


def format_name(t):
    return FORMAT_NAMES[str(t.dtype).split(".")[1]]


def raw_bytes(torch, t):
    """A tensor's bytes as stored: little-endian, row-major."""
    flat = t.detach().cpu().contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy().tobytes()) if flat.numel() else b""


def sample_tensors(torch, big=False, seed=11):
    """{name: CPU tensor}: every dtype this torch has, a scalar, an empty tensor, odd sizes; with
    `big`, one of several MiB (several chunks and write pieces), an odd size."""
    g = torch.Generator().manual_seed(seed)
    out = {
        "embed.weight": torch.randn(33, 17, generator=g),
        "norm": torch.randn(17, generator=g).to(torch.bfloat16),
        "half": torch.randn(5, 3, generator=g).to(torch.float16),
        "ids": torch.randint(-(1 << 40), 1 << 40, (7,), generator=g, dtype=torch.int64),
        "mask": torch.rand(11, generator=g) > 0.5,
        "bytes": torch.randint(0, 255, (13,), generator=g, dtype=torch.uint8),
        "small": torch.randint(-100, 100, (3, 3), generator=g, dtype=torch.int8),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 4),
        "i16": torch.randint(-1000, 1000, (9,), generator=g, dtype=torch.int16),
        "i32": torch.randint(-(1 << 30), 1 << 30, (2, 2, 3), generator=g, dtype=torch.int32),
        "c64": torch.randn(4, generator=g, dtype=torch.complex64),
        "Z.upper": torch.randn(3, generator=g),  # sorts before the lower-case names of its dtype
    }
    for name in ("uint16", "uint32", "uint64", "float8_e5m2", "float8_e4m3fn"):  # where this torch has them
        dtype = getattr(torch, name, None)
        if dtype is not None:
            out[name] = torch.randint(0, 100, (6,), generator=g, dtype=torch.uint8).view(dtype) \
                if dtype.itemsize == 1 else torch.randint(0, 100, (6,), generator=g, dtype=torch.int64).to(dtype)
    if big:
        out["big"] = torch.randn(5 * 262144 + 3, generator=g)
    return out
