#!/usr/bin/env python3
"""ckpt_meta.py CKPT [KEY] — prints one __metadata__ value of an lstmd safetensors checkpoint
(KEY defaults to train.step), for the shell tests. Reads the header only; standard library only.
Exit 1 (message on stderr) when the file is short, not safetensors, or lacks the key."""
import json
import struct
import sys


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[0])
    key = argv[2] if len(argv) == 3 else "train.step"
    try:
        with open(argv[1], "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 1 << 24:
                raise ValueError(f"header of {n} bytes")
            print(json.loads(f.read(n))["__metadata__"][key])
    except (OSError, ValueError, KeyError, struct.error) as e:
        sys.exit(f"ckpt_meta.py: {argv[1]}: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main(sys.argv)
